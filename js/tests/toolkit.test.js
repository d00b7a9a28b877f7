import { describe, expect, it } from "vitest";
import { buildUnits, maxMagnitude, ranksByMagnitude, unitScores } from "../src/lib/aggregate.js";
import { PALETTES, contrast, legendGradient, scoreColours, scoreRgb, textRgbFor } from "../src/lib/colour.js";
import { formatProbability, formatScore } from "../src/lib/format.js";
import { displayToken, quoteToken } from "../src/lib/text.js";

describe("colour scale", () => {
  it("is centred on zero and symmetric in magnitude", () => {
    for (const theme of ["light", "dark"]) {
      const p = PALETTES[theme];
      expect(scoreRgb(0, 2, theme)).toEqual(p.mid);
      expect(scoreRgb(2, 2, theme)).toEqual(p.positive[1]);
      expect(scoreRgb(-2, 2, theme)).toEqual(p.negative[1]);
      expect(scoreRgb(1, 2, theme)).toEqual(p.positive[0]);
      expect(scoreRgb(-1, 2, theme)).toEqual(p.negative[0]);
      expect(scoreRgb(5, 2, theme)).toEqual(p.positive[1]); // clipped
    }
    expect(scoreRgb(0.5, 2, "light")).toEqual([250, 216, 173]); // halfway from mid to the light orange stop
    expect(scoreRgb(3, 0, "light")).toEqual(PALETTES.light.mid); // an all-zero row is neutral
  });

  it("chooses text with at least WCAG AA contrast everywhere on the scale", () => {
    for (const theme of ["light", "dark"]) {
      for (let k = -100; k <= 100; k += 1) {
        const background = scoreRgb(k / 100, 1, theme);
        expect(contrast(background, textRgbFor(background))).toBeGreaterThanOrEqual(4.5);
      }
    }
    expect(scoreColours(-1, 1, "light")).toEqual({ background: "rgb(33, 102, 172)", color: "rgb(255, 255, 255)" });
    expect(scoreColours(1, 1, "light")).toEqual({ background: "rgb(230, 97, 1)", color: "rgb(0, 0, 0)" });
    expect(legendGradient("light")).toBe(
      "linear-gradient(to right, rgb(33, 102, 172), rgb(146, 197, 222), rgb(247, 247, 247), rgb(253, 184, 99), rgb(230, 97, 1))",
    );
  });

  it("scoreColours answers from its cache exactly what it computes fresh", () => {
    const fresh = (score, max, theme, options) => {
      const background = scoreRgb(score, max, theme, options);
      return { background: `rgb(${background.join(", ")})`, color: `rgb(${textRgbFor(background).join(", ")})` };
    };
    for (const theme of ["light", "dark"]) {
      for (const options of [{}, { signed: false }, { boost: true }]) {
        for (let k = -300; k <= 300; k += 1) {
          const score = k / 97;
          expect(scoreColours(score, 2.5, theme, options)).toEqual(fresh(score, 2.5, theme, options));
          expect(scoreColours(score, 2.5, theme, options)).toEqual(fresh(score, 2.5, theme, options)); // a cache hit
        }
      }
    }
  });
});

describe("formatting", () => {
  it("formats scores with significant digits and a real minus sign", () => {
    expect(formatScore(0)).toBe("0");
    expect(formatScore(0.123456)).toBe("0.123");
    expect(formatScore(-0.123456, { digits: 6 })).toBe("\u22120.123456");
    expect(formatScore(0.5, { sign: true })).toBe("+0.5");
    expect(formatScore(1.5e-6)).toBe("1.5e-6");
    expect(formatScore(-123456)).toBe("\u22121.23e+5");
    expect(formatProbability(0.93123)).toBe("93.1%");
  });

  it("makes whitespace-only and empty tokens visible and quotes tokens", () => {
    expect(displayToken("word")).toBe("word");
    expect(displayToken(" ")).toBe("\u00b7");
    expect(displayToken("\n\n")).toBe("\u21b5\n\u21b5\n");
    expect(displayToken("")).toBe("\u2205");
    expect(quoteToken('say "hi"\n')).toBe('"say \\"hi\\"\\n"');
  });
});

describe("aggregation", () => {
  // [CLS] un believ able film . [SEP]
  const specialMask = [1, 0, 0, 0, 0, 0, 1];
  const wordIds = [-1, 0, 0, 0, 1, 2, -1];
  const sentenceIds = [-1, 0, 0, 0, 0, 0, -1];
  const scores = new Float32Array([9, 1, 2, 3, -4, 0.5, 9, /* second target */ 0, -1, -1, -1, 2, 0, 0]);

  it("groups consecutive tokens into words and sentences, specials alone", () => {
    const base = { wordIds, sentenceIds, specialMask, showSpecial: false };
    expect(buildUnits({ ...base, granularity: "token" })).toEqual([[1], [2], [3], [4], [5]]);
    expect(buildUnits({ ...base, granularity: "word" })).toEqual([[1, 2, 3], [4], [5]]);
    expect(buildUnits({ ...base, granularity: "sentence" })).toEqual([[1, 2, 3, 4, 5]]);
    expect(buildUnits({ ...base, granularity: "word", showSpecial: true })).toEqual([[0], [1, 2, 3], [4], [5], [6]]);
    expect(() => buildUnits({ ...base, granularity: "paragraph" })).toThrow(/unknown granularity "paragraph"/);
  });

  it("sums each unit's scores for the chosen target", () => {
    const words = buildUnits({ wordIds, sentenceIds, specialMask, showSpecial: false, granularity: "word" });
    expect(Array.from(unitScores(words, scores, 0, 7))).toEqual([6, -4, 0.5]);
    expect(Array.from(unitScores(words, scores, 1, 7))).toEqual([-3, 2, 0]);
  });

  it("ranks by decreasing magnitude with shared ranks for ties", () => {
    expect(Array.from(ranksByMagnitude([0.1, -3, 2, -2, 0]))).toEqual([4, 1, 2, 2, 5]);
    expect(Array.from(ranksByMagnitude([Number.NaN, -1, 2]))).toEqual([0, 2, 1]);
  });

  it("skips unseen (NaN) tokens in sums; a unit is NaN only if all its tokens are", () => {
    const units = [[0, 1], [2, 3], [4]];
    const row = Float32Array.from([1, Number.NaN, Number.NaN, Number.NaN, -2]);
    const sums = unitScores(units, row, 0, 5);
    expect(sums[0]).toBe(1);
    expect(Number.isNaN(sums[1])).toBe(true);
    expect(sums[2]).toBe(-2);
    expect(maxMagnitude(sums)).toBe(2);
  });
});
