/**
 * Pure numeric helpers of the canvas plotter: M4 decimation (first/min/max/last per pixel column),
 * band decimation, EMA smoothing, axis ticks, and runs of a 0/1 series (the fit window).
 *
 * @example
 *   const pts = decimateM4(x, y, 0, n, x0, x1, 600); // ≤ 4 points per pixel column, same picture
 */

/**
 * Decimate finite points (x[i], y[i]) for i in [start, end) to at most four per pixel column: the first,
 * lowest, highest and last point of the column, in index order. A line through them is pixel-identical
 * to a line through every point. NaN values and, with `positiveOnly` (log axes), values ≤ 0 are skipped.
 * @returns {{xs: Float64Array, ys: Float64Array, count: number}}
 */
export function decimateM4(x, y, start, end, x0, x1, width, { positiveOnly = false } = {}) {
  const xs = new Float64Array(Math.min(end - start, 4 * (width + 2)) + 4);
  const ys = new Float64Array(xs.length);
  let count = 0;
  const span = x1 - x0 || 1;
  let column = NaN;
  let first = -1;
  let low = -1;
  let high = -1;
  let last = -1;
  const flush = () => {
    if (first < 0) return;
    const picks = [first, low, high, last].sort((a, b) => a - b);
    let previous = -1;
    for (const i of picks) {
      if (i === previous) continue;
      previous = i;
      xs[count] = x[i];
      ys[count] = y[i];
      count += 1;
    }
  };
  for (let i = start; i < end; i += 1) {
    const v = y[i];
    if (!(v === v) || (positiveOnly && !(v > 0))) continue;
    const c = Math.floor(((x[i] - x0) / span) * width);
    if (c !== column) {
      flush();
      column = c;
      first = low = high = last = i;
      continue;
    }
    if (v < y[low]) low = i;
    if (v > y[high]) high = i;
    last = i;
  }
  flush();
  return { xs, ys, count };
}

/**
 * Decimate a band (lo[i]..hi[i]) to one entry per pixel column: the column's first x, lowest lo and
 * highest hi, so the shaded area covers every original band segment. Rows where either bound is NaN are
 * skipped; with `positiveOnly`, non-positive bounds are too.
 * @returns {{xs: Float64Array, lo: Float64Array, hi: Float64Array, count: number}}
 */
export function decimateBand(x, lo, hi, start, end, x0, x1, width, { positiveOnly = false } = {}) {
  const size = Math.min(end - start, width + 2) + 2;
  const xs = new Float64Array(size);
  const los = new Float64Array(size);
  const his = new Float64Array(size);
  let count = 0;
  const span = x1 - x0 || 1;
  let column = NaN;
  for (let i = start; i < end; i += 1) {
    const a = lo[i];
    const b = hi[i];
    if (!(a === a) || !(b === b) || (positiveOnly && !(a > 0 && b > 0))) continue;
    const c = Math.floor(((x[i] - x0) / span) * width);
    if (c !== column || count === 0) {
      column = c;
      xs[count] = x[i];
      los[count] = a;
      his[count] = b;
      count += 1;
    } else {
      if (a < los[count - 1]) los[count - 1] = a;
      if (b > his[count - 1]) his[count - 1] = b;
    }
  }
  return { xs, lo: los, hi: his, count };
}

/**
 * Exponential moving average over the finite values of y[0..n) with TensorBoard's debiasing, so the
 * first smoothed values are not pulled towards zero. NaN stays NaN. `weight` 0 returns a copy.
 * @example emaSmooth(Float32Array.of(1, NaN, 3), 3, 0.5) // [1, NaN, 2.333…]
 */
export function emaSmooth(y, n, weight) {
  const out = new Float32Array(n);
  let accumulator = 0;
  let steps = 0;
  for (let i = 0; i < n; i += 1) {
    const v = y[i];
    if (!(v === v)) {
      out[i] = NaN;
      continue;
    }
    accumulator = accumulator * weight + (1 - weight) * v;
    steps += 1;
    out[i] = weight === 0 ? v : accumulator / (1 - weight ** steps);
  }
  return out;
}

/**
 * Index ranges [from, to] (inclusive rows) where `flag[i] ≥ 0.5`, for i in [0, n).
 * @example runsOf(Float32Array.of(0, 1, 1, 0, 1), 5) // [[1, 2], [4, 4]]
 */
export function runsOf(flag, n) {
  const runs = [];
  let begin = -1;
  for (let i = 0; i < n; i += 1) {
    const on = flag[i] >= 0.5;
    if (on && begin < 0) begin = i;
    if (!on && begin >= 0) {
      runs.push([begin, i - 1]);
      begin = -1;
    }
  }
  if (begin >= 0) runs.push([begin, n - 1]);
  return runs;
}

/**
 * About `count` round tick values covering [lo, hi] (1, 2, 5 × 10^k steps).
 * @example niceTicks(0, 1, 5) // [0, 0.2, 0.4, 0.6, 0.8, 1]
 */
export function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo)) return Number.isFinite(lo) ? [lo] : [];
  const raw = (hi - lo) / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) ?? 10 * power;
  const ticks = [];
  for (let k = Math.ceil(lo / step); k * step <= hi + step * 1e-9; k += 1) ticks.push(Number((k * step).toPrecision(12)));
  return ticks;
}

/**
 * Powers of ten inside [lo, hi] (lo > 0); when fewer than two fit, 1-2-5 multiples as well.
 * @example logTicks(0.5, 200) // [1, 10, 100]
 */
export function logTicks(lo, hi) {
  if (!(lo > 0) || !(hi >= lo)) return [];
  const powers = [];
  for (let k = Math.ceil(Math.log10(lo) - 1e-9); 10 ** k <= hi * (1 + 1e-9); k += 1) powers.push(Number((10 ** k).toPrecision(12)));
  if (powers.length >= 2) return powers;
  const ticks = [];
  for (let k = Math.floor(Math.log10(lo)); 10 ** k <= hi; k += 1) {
    for (const m of [1, 2, 5]) {
      const v = Number((m * 10 ** k).toPrecision(12));
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push(v);
    }
  }
  return ticks;
}

/** A mapping from data to pixels: `scale.px(v)`, `scale.value(px)`; log scales work in log10. */
export function makeScale(kind, [d0, d1], [r0, r1]) {
  const log = kind === "log";
  const f = log ? Math.log10 : (v) => v;
  const a = f(d0);
  const b = f(d1);
  const span = b - a || 1;
  return {
    kind,
    domain: [d0, d1],
    px: (v) => r0 + ((f(v) - a) / span) * (r1 - r0),
    value: (p) => {
      const t = a + ((p - r0) / (r1 - r0)) * span;
      return log ? 10 ** t : t;
    },
  };
}

/**
 * First index in `x[0..n)` (sorted ascending) whose value is ≥ `value`.
 * @example lowerBound(Float64Array.of(1, 2, 4), 3, 3) // 2
 */
export function lowerBound(x, n, value) {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (x[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
