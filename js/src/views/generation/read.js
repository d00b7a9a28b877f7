/**
 * Generation attribution, read: the synced traits -> the plain state the view draws, and pure functions over it.
 *
 * @example
 *   const data = read(model); // {n, tokens, steps, stepAt, scores, foils, ...}
 *   const values = unitRow(data, data.scores.subarray(0, data.n), "word");
 */
import { buildUnits } from "../../lib/aggregate.js";
import { decodeArray, hasArray } from "../../lib/codec.js";

/** @typedef {import("../../generation.js").GenerationModel} GenerationModel */
/**
 * @template {object} T
 * @typedef {import("../../lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * Read and check the synced data.
 * @param {AnyModel<GenerationModel>} model
 */
export function read(model) {
  const tokens = model.get("tokens") ?? [];
  const n = tokens.length;
  if (n === 0) throw new RangeError("there are no tokens to display");
  const spaces = model.get("spaces_before") ?? [];
  if (spaces.length !== n) throw new RangeError(`spaces_before has ${spaces.length} entries for ${n} tokens`);
  const scores = decodeArray(model.get("scores"));
  const steps = model.get("step_tokens") ?? [];
  if (scores.shape.length !== 2 || scores.shape[1] !== n || scores.shape[0] !== steps.length) {
    throw new RangeError(
      `scores have shape [${scores.shape.join(", ")}], expected [${steps.length} generated tokens, ${n} tokens]`,
    );
  }
  const special = decodeArray(model.get("special_mask")).values;
  const generated = decodeArray(model.get("generated_mask")).values;
  if (special.length !== n || generated.length !== n)
    throw new RangeError(`special_mask and generated_mask need ${n} entries`);
  // payloads from before turns existed have none: the prompt and reply are then one turn without a role
  const turnIds = hasArray(model.get("turn_ids")) ? decodeArray(model.get("turn_ids")).values : null;
  if (turnIds && turnIds.length !== n) throw new RangeError(`turn_ids has ${turnIds.length} entries for ${n} tokens`);
  const stepAt = new Int32Array(n).fill(-1); // generation step of each token, -1 for the prompt
  steps.forEach((index, step) => {
    if (!(index >= 0 && index < n) || generated[index] === 0)
      throw new RangeError(`step token ${index} is not a generated token`);
    stepAt[index] = step;
  });
  // optional per-token arrays (absent in version-2 data): token granularity, one side
  const optional = (name, fallback) => {
    const payload = model.get(name);
    if (!payload || !payload.shape) return fallback;
    const values = decodeArray(payload).values;
    if (values.length !== n) throw new RangeError(`${name} has ${values.length} entries for ${n} tokens`);
    return values;
  };
  const wordIds = optional(
    "word_ids",
    Int32Array.from({ length: n }, (_, i) => i),
  );
  const sentenceIds = optional("sentence_ids", new Int32Array(n));
  const source = optional("source_mask", new Uint8Array(n));
  const foils = model.get("foil_tokens") ?? [];
  if (foils.length !== 0 && foils.length !== steps.length)
    throw new RangeError(`foil_tokens has ${foils.length} entries for ${steps.length} generated tokens`);
  return {
    n, tokens, spaces, special, generated, steps, stepAt, foils, turnIds, wordIds, sentenceIds, source,
    sides: source.some((v) => v !== 0),
    roles: model.get("turn_roles") ?? [],
    scores: scores.values,
    probs: model.get("step_probs") ?? [],
    foilProbs: model.get("foil_probs") ?? [],
    contrast: model.get("contrast") ?? "",
    method: model.get("method") ?? "",
    meaning: model.get("score_meaning") ?? "",
    signed: model.get("signed") !== false,
  }; // prettier-ignore
}

/**
 * The scores of one row as drawn at `granularity`: each token gets its unit's sum (NaN when the whole unit is).
 * @param {{wordIds: ArrayLike<number>, sentenceIds: ArrayLike<number>, turnIds?: ArrayLike<number> | null,
 *          special: ArrayLike<number>}} data
 * @param {ArrayLike<number>} values  one row of token scores
 * @param {"token" | "word" | "sentence"} granularity
 * @returns {ArrayLike<number>}
 */
export function unitRow(data, values, granularity) {
  if (granularity === "token" || !granularity) return values;
  const units = buildUnits({
    granularity,
    wordIds: data.wordIds,
    sentenceIds: data.sentenceIds,
    turnIds: data.turnIds ?? undefined,
    specialMask: data.special,
    showSpecial: true,
  });
  const out = new Float64Array(values.length);
  for (const unit of units) {
    let sum = 0;
    let seen = false;
    for (const i of unit) {
      if (Number.isNaN(values[i])) continue;
      sum += values[i];
      seen = true;
    }
    for (const i of unit) out[i] = seen ? sum : Number.NaN;
  }
  return out;
}

/**
 * ln(p / q), log p(target) − log p(foil), or null when a probability is unknown or zero.
 * @param {number | null | undefined} p
 * @param {number | null | undefined} q
 */
export function logRatio(p, q) {
  return Number.isFinite(p) && Number.isFinite(q) && p > 0 && q > 0 ? Math.log(p) - Math.log(q) : null;
}
