/**
 * Column store for streamed training curves: one shared x column (float64) and one float32 column per
 * series, grown by doubling. Rows arrive as "append" custom messages (only new rows) or as a full-history
 * checkpoint that replaces everything. NaN marks a value that was not logged at that row.
 *
 * Wire format (little-endian, written by interp_widgets/widgets/monitor.py):
 *   append message: content {type: "iw-monitor-append", series: [names], start, rows}
 *                   buffers [x: float64 × rows, values: float32 × (series × rows), series-major]
 *   checkpoint:     bytes = x float64 × rows, then values float32 × (series × rows); schema {series, rows}
 * Buffers are DataViews that may start at any byteOffset inside a larger ArrayBuffer.
 *
 * @example
 *   const store = new SeriesStore();
 *   const stop = store.subscribe(() => view.request());
 *   store.append(decodeAppend(msg, buffers));
 */

/** Bytes of any binary payload as a Uint8Array (no copy). */
function bytesOf(data) {
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  throw new TypeError(`expected binary data (DataView or ArrayBuffer), got ${data === null ? "null" : typeof data}`);
}

/**
 * A typed array over `count` elements of `bytes` starting `at` bytes in; copies when the absolute offset
 * is not aligned to the element size (a DataView can start anywhere).
 */
export function typedAt(Type, bytes, at, count) {
  const need = count * Type.BYTES_PER_ELEMENT;
  if (at + need > bytes.byteLength) {
    throw new RangeError(`binary payload has ${bytes.byteLength} bytes, needs ${at + need}`);
  }
  const offset = bytes.byteOffset + at;
  if (offset % Type.BYTES_PER_ELEMENT === 0) return new Type(bytes.buffer, offset, count);
  return new Type(bytes.slice(at, at + need).buffer);
}

function decodeBlock(names, rows, xData, valuesData, valuesAt = 0) {
  if (!Array.isArray(names)) throw new TypeError("series names must be a list");
  if (!Number.isInteger(rows) || rows < 0)
    throw new RangeError(`row count must be a non-negative integer, got ${rows}`);
  const xBytes = bytesOf(xData);
  const x = typedAt(Float64Array, xBytes, 0, rows);
  const valueBytes = valuesData === xData ? xBytes : bytesOf(valuesData);
  const values = typedAt(Float32Array, valueBytes, valuesAt, names.length * rows);
  const expected = valuesAt + names.length * rows * 4;
  if (valueBytes.byteLength !== expected) {
    throw new RangeError(
      `binary payload has ${valueBytes.byteLength} bytes, expected ${expected} for ${names.length} series × ${rows} rows`,
    );
  }
  return { names, rows, x, values };
}

/**
 * Decode an append message into `{names, start, rows, x, values}`.
 * @param {{series: string[], start: number, rows: number}} content
 * @param {ArrayBufferView[]} buffers  [x float64, values float32 series-major]
 */
export function decodeAppend(content, buffers) {
  if (!buffers || buffers.length !== 2)
    throw new RangeError(`an append message needs 2 buffers, got ${buffers?.length ?? 0}`);
  const block = decodeBlock(content.series, content.rows, buffers[0], buffers[1]);
  if (bytesOf(buffers[0]).byteLength !== content.rows * 8)
    throw new RangeError(`x buffer must hold ${content.rows} float64 values`);
  return { ...block, start: content.start };
}

/**
 * Decode the checkpoint trait (bytes + schema) into `{names, start: 0, rows, x, values}`, or null when empty.
 * @param {ArrayBufferView | ArrayBuffer | null} data
 * @param {{series?: string[], rows?: number}} schema
 */
export function decodeCheckpoint(data, schema) {
  const rows = schema?.rows ?? 0;
  if (!data || rows === 0)
    return { names: schema?.series ?? [], start: 0, rows: 0, x: new Float64Array(0), values: new Float32Array(0) };
  return { ...decodeBlock(schema.series, rows, data, data, rows * 8), start: 0 };
}

export class SeriesStore {
  constructor() {
    /** number of rows */
    this.n = 0;
    /** increases on every change; views cache derived data by it */
    this.version = 0;
    /** increases when the history is replaced (caches that extend incrementally must restart) */
    this.epoch = 0;
    this.x = new Float64Array(64);
    /** @type {Map<string, Float32Array>} */
    this.columns = new Map();
    this.listeners = new Set();
  }

  /** Series names in order of first appearance. */
  get names() {
    return [...this.columns.keys()];
  }

  /** The column of `name` (length ≥ n; only the first n values are rows), or null. */
  column(name) {
    return this.columns.get(name) ?? null;
  }

  /** Call `fn()` after every change; returns the unsubscribe function. */
  subscribe(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  #grow(rows) {
    if (rows <= this.x.length) return;
    let capacity = this.x.length;
    while (capacity < rows) capacity *= 2;
    const x = new Float64Array(capacity);
    x.set(this.x.subarray(0, this.n));
    this.x = x;
    for (const [name, column] of this.columns) {
      const grown = new Float32Array(capacity).fill(NaN);
      grown.set(column.subarray(0, this.n));
      this.columns.set(name, grown);
    }
  }

  #ensureColumn(name) {
    if (!this.columns.has(name)) this.columns.set(name, new Float32Array(this.x.length).fill(NaN));
    return this.columns.get(name);
  }

  #write(block, skip) {
    const count = block.rows - skip;
    this.#grow(this.n + count);
    this.x.set(block.x.subarray(skip), this.n);
    block.names.forEach((name, s) => {
      const column = this.#ensureColumn(name);
      column.set(block.values.subarray(s * block.rows + skip, (s + 1) * block.rows), this.n);
    });
    this.n += count;
  }

  #changed() {
    this.version += 1;
    for (const fn of [...this.listeners]) fn();
  }

  /**
   * Append a decoded block. Rows the store already holds (block.start < n, e.g. sent before a checkpoint
   * that already contained them) are skipped, so a checkpoint followed by overlapping messages never
   * duplicates a step. Returns the number of rows added.
   */
  append(block) {
    const start = Number.isInteger(block.start) ? block.start : this.n;
    const skip = Math.min(block.rows, Math.max(0, this.n - start));
    if (skip === block.rows) return 0;
    this.#write(block, skip);
    this.#changed();
    return block.rows - skip;
  }

  /** Replace the whole history with a decoded checkpoint. */
  replace(block) {
    this.n = 0;
    this.columns = new Map();
    this.x = new Float64Array(64);
    this.epoch += 1;
    if (block.rows > 0) this.#write(block, 0);
    for (const name of block.names) this.#ensureColumn(name);
    this.#changed();
  }
}
