/**
 * Pure numeric helpers of the canvas plotter: M4 decimation (first/min/max/last per pixel column),
 * band decimation, EMA smoothing, axis ticks, and runs of a 0/1 series (the fit window).
 *
 * @example
 *   const pts = decimateM4(x, y, 0, n, x0, x1, 600); // ≤ 4 points per pixel column, same picture
 */

function grown(array, size) {
  if (size <= array.length) return array;
  const bigger = new Float64Array(Math.max(size, 2 * array.length));
  bigger.set(array);
  return bigger;
}

/**
 * Resumable M4 decimation of finite points to at most four per pixel column of [x0, x1] split into
 * `width` columns: the first, lowest, highest and last point of each column, in index order. A line through
 * them is pixel-identical to a line through every point. `extend` continues where the previous call stopped,
 * so streaming appends cost O(new rows). NaN values and, with `positiveOnly` (log axes), values ≤ 0 are
 * skipped.
 * @example
 *   const m4 = new M4Decimator(0, 1000, 600); m4.extend(x, y, 0, n); m4.result().count
 */
export class M4Decimator {
  constructor(x0, x1, width, { positiveOnly = false } = {}) {
    Object.assign(this, { x0, x1, width, positiveOnly, span: x1 - x0 || 1 });
    this.xs = new Float64Array(64);
    this.ys = new Float64Array(64);
    this.count = 0; // committed points (closed columns)
    this.next = 0; // next row to read
    this.column = NaN;
    this.o = null; // the open column's first, low, high and last points
  }

  #push(into, x, y) {
    if (into.count >= into.xs.length) {
      into.xs = grown(into.xs, into.count + 1);
      into.ys = grown(into.ys, into.count + 1);
    }
    into.xs[into.count] = x;
    into.ys[into.count] = y;
    into.count += 1;
  }

  /** Emit the open column (first, then low/high in index order, then last; each index once) into `into`. */
  #emitOpen(into) {
    const o = this.o;
    const lowFirst = o.li < o.hi;
    const [ai, ax, ay, bi, bx, by] = lowFirst
      ? [o.li, o.lx, o.ly, o.hi, o.hx, o.hy]
      : [o.hi, o.hx, o.hy, o.li, o.lx, o.ly];
    this.#push(into, o.fx, o.fy);
    if (ai !== o.fi && ai !== o.zi) this.#push(into, ax, ay);
    if (bi !== o.fi && bi !== o.zi && bi !== ai) this.#push(into, bx, by);
    if (o.zi !== o.fi) this.#push(into, o.zx, o.zy);
  }

  /**
   * Start from the points of a decimator over the same x0 and width but half the span: each new column is
   * exactly two old ones, so M4 of their M4 points equals M4 of the raw rows (and costs O(pixels)).
   */
  static widen(old, x1) {
    const wide = new M4Decimator(old.x0, x1, old.width, { positiveOnly: old.positiveOnly });
    const seed = old.result();
    wide.extend(seed.xs, seed.ys, 0, seed.count, -seed.count - 1); // negative ids never meet row indices
    wide.next = old.next;
    return wide;
  }

  /** Read rows [max(start, next), end) of x and y (`idBase` shifts the row ids used to tell points apart). */
  extend(x, y, start, end, idBase = 0) {
    const { x0, span, width, positiveOnly } = this;
    let o = this.o;
    for (let k = Math.max(start, idBase === 0 ? this.next : start); k < end; k += 1) {
      const i = k + idBase;
      const v = y[k];
      if (!(v === v) || (positiveOnly && !(v > 0))) continue;
      const xi = x[k];
      const c = Math.floor(((xi - x0) / span) * width);
      if (c !== this.column) {
        if (o) this.#emitOpen(this);
        this.column = c;
        // f = first, l = low, h = high, z = last: index, x, y of each
        o = this.o = { fi: i, fx: xi, fy: v, li: i, lx: xi, ly: v, hi: i, hx: xi, hy: v, zi: i, zx: xi, zy: v };
        continue;
      }
      if (v < o.ly) {
        o.li = i;
        o.lx = xi;
        o.ly = v;
      }
      if (v > o.hy) {
        o.hi = i;
        o.hx = xi;
        o.hy = v;
      }
      o.zi = i;
      o.zx = xi;
      o.zy = v;
    }
    if (idBase === 0) this.next = Math.max(this.next, end);
    return this;
  }

  /** The decimated points so far (closed columns plus the open one): {xs, ys, count}. */
  result() {
    const out = { xs: this.xs, ys: this.ys, count: this.count };
    if (!this.o) return out;
    this.#emitOpen(out); // writes past `count` without committing the open column
    this.xs = out.xs;
    this.ys = out.ys;
    return out;
  }
}

/**
 * Decimate finite points (x[i], y[i]) for i in [start, end) with {@link M4Decimator}.
 * @returns {{xs: Float64Array, ys: Float64Array, count: number}}
 */
export function decimateM4(x, y, start, end, x0, x1, width, options = {}) {
  return new M4Decimator(x0, x1, width, options).extend(x, y, start, end).result();
}

/**
 * Resumable band decimation: one entry per pixel column with the column's first x, lowest lo and highest hi,
 * so the shaded area covers every original band segment. Rows where either bound is NaN are skipped; with
 * `positiveOnly`, non-positive bounds are too.
 */
export class BandDecimator {
  constructor(x0, x1, width, { positiveOnly = false } = {}) {
    Object.assign(this, { x0, x1, width, positiveOnly, span: x1 - x0 || 1 });
    this.xs = new Float64Array(64);
    this.lo = new Float64Array(64);
    this.hi = new Float64Array(64);
    this.count = 0;
    this.next = 0;
    this.column = NaN;
  }

  /** Like {@link M4Decimator.widen}: the same x0 and width, twice the span, seeded from `old`'s columns. */
  static widen(old, x1) {
    const wide = new BandDecimator(old.x0, x1, old.width, { positiveOnly: old.positiveOnly });
    wide.extend(old.xs, old.lo, old.hi, 0, old.count);
    wide.next = old.next;
    return wide;
  }

  extend(x, lo, hi, start, end) {
    const { x0, span, width, positiveOnly } = this;
    for (let i = Math.max(start, this.next); i < end; i += 1) {
      const a = lo[i];
      const b = hi[i];
      if (!(a === a) || !(b === b) || (positiveOnly && !(a > 0 && b > 0))) continue;
      const c = Math.floor(((x[i] - x0) / span) * width);
      if (c !== this.column || this.count === 0) {
        this.column = c;
        this.xs = grown(this.xs, this.count + 1);
        this.lo = grown(this.lo, this.count + 1);
        this.hi = grown(this.hi, this.count + 1);
        this.xs[this.count] = x[i];
        this.lo[this.count] = a;
        this.hi[this.count] = b;
        this.count += 1;
      } else {
        if (a < this.lo[this.count - 1]) this.lo[this.count - 1] = a;
        if (b > this.hi[this.count - 1]) this.hi[this.count - 1] = b;
      }
    }
    this.next = Math.max(this.next, end);
    return this;
  }
}

/**
 * Decimate a band (lo[i]..hi[i]) for i in [start, end) with {@link BandDecimator}.
 * @returns {{xs: Float64Array, lo: Float64Array, hi: Float64Array, count: number}}
 */
export function decimateBand(x, lo, hi, start, end, x0, x1, width, options = {}) {
  return new BandDecimator(x0, x1, width, options).extend(x, lo, hi, start, end);
}

/**
 * Running exponential moving average with TensorBoard's debiasing, so the first smoothed values are not
 * pulled towards zero. NaN in gives NaN out and leaves the state unchanged.
 * @example const ema = new EmaState(0.5); [1, 3].map((v) => ema.next(v)) // [1, 2.333…]
 */
export class EmaState {
  constructor(weight) {
    this.weight = weight;
    this.accumulator = 0;
    this.steps = 0;
  }

  next(v) {
    if (!(v === v)) return NaN;
    if (this.weight === 0) return v;
    this.accumulator = this.accumulator * this.weight + (1 - this.weight) * v;
    this.steps += 1;
    return this.accumulator / (1 - this.weight ** this.steps);
  }
}

/**
 * {@link EmaState} over y[0..n) as a new array. `weight` 0 returns a copy.
 * @example emaSmooth(Float32Array.of(1, NaN, 3), 3, 0.5) // [1, NaN, 2.333…]
 */
export function emaSmooth(y, n, weight) {
  const ema = new EmaState(weight);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i += 1) out[i] = ema.next(y[i]);
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
  for (let k = Math.ceil(lo / step); k * step <= hi + step * 1e-9; k += 1)
    ticks.push(Number((k * step).toPrecision(12)));
  return ticks;
}

/**
 * Powers of ten inside [lo, hi] (lo > 0); when fewer than two fit, 1-2-5 multiples as well.
 * @example logTicks(0.5, 200) // [1, 10, 100]
 */
export function logTicks(lo, hi) {
  if (!(lo > 0) || !(hi >= lo)) return [];
  const powers = [];
  for (let k = Math.ceil(Math.log10(lo) - 1e-9); 10 ** k <= hi * (1 + 1e-9); k += 1)
    powers.push(Number((10 ** k).toPrecision(12)));
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
