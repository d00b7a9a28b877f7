/**
 * Binary array codec shared by every widget.
 *
 * Python sends arrays as `{dtype, shape, data}` where `data` arrives as a DataView (anywidget) or any
 * ArrayBufferView / ArrayBuffer (export pages, tests). A DataView may start at a non-zero `byteOffset`
 * inside a larger buffer, so typed arrays are always built from `(buffer, byteOffset, length)` and
 * copied when the offset is not aligned to the element size. Data is little-endian (the Python side
 * guarantees it and every browser platform is little-endian).
 *
 * @example
 *   const {values, shape} = decodeArray(model.get("scores"));
 *   values[0]; // first score as a float
 */

/**
 * A numpy array as a synced trait carries it (Python `array_to_buffer`, the `BinaryArray` trait type): values of
 * `dtype`, little-endian, C order, in the binary `data` buffer; `bool` is one byte per value.
 * @typedef {object} BinaryArray
 * @property {"float32" | "float64" | "int8" | "uint8" | "int16" | "uint16" | "int32" | "uint32" | "bool"} dtype
 * @property {number[]} shape
 * @property {ArrayBuffer | ArrayBufferView} data  A DataView in a live widget; any buffer or view on export pages.
 */

const ARRAY_TYPES = {
  float32: Float32Array,
  float64: Float64Array,
  int8: Int8Array,
  uint8: Uint8Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
  bool: Uint8Array,
};

/**
 * View any binary payload as bytes without copying.
 * @param {ArrayBuffer | ArrayBufferView} data
 * @returns {Uint8Array}
 */
function asBytes(data) {
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  throw new TypeError(`array payload "data" must be binary (DataView or ArrayBuffer), got ${typeof data}`);
}

/**
 * Whether a synced value is an array payload: an optional array the kernel left out arrives as {} (or null, or
 * not at all in a payload from before the array existed).
 * @param {unknown} payload
 * @example hasArray({}) // false
 */
export function hasArray(payload) {
  return payload !== null && typeof payload === "object" && "dtype" in payload;
}

/**
 * Decode a `{dtype, shape, data}` payload into a typed array.
 * @param {BinaryArray} payload
 * @returns {{dtype: string, shape: number[], values: ArrayLike<number>}}
 * @example decodeArray({dtype: "float32", shape: [2], data: new DataView(buf, 8, 8)}).values
 */
export function decodeArray(payload) {
  if (payload === null || typeof payload !== "object") {
    throw new TypeError("expected an array payload {dtype, shape, data}");
  }
  const Type = ARRAY_TYPES[payload.dtype];
  if (!Type) throw new TypeError(`unsupported array dtype "${payload.dtype}"`);
  const shape = Array.from(payload.shape ?? [], Number);
  const size = shape.reduce((a, b) => a * b, 1);
  const bytes = asBytes(payload.data);
  if (bytes.byteLength !== size * Type.BYTES_PER_ELEMENT) {
    throw new RangeError(
      `array payload has ${bytes.byteLength} bytes but shape [${shape.join(", ")}] of ${payload.dtype} ` +
        `needs ${size * Type.BYTES_PER_ELEMENT}`,
    );
  }
  const aligned = bytes.byteOffset % Type.BYTES_PER_ELEMENT === 0;
  const values = aligned ? new Type(bytes.buffer, bytes.byteOffset, size) : new Type(bytes.slice().buffer);
  return { dtype: payload.dtype, shape, values };
}

/**
 * Decode base64 text into a DataView over a fresh buffer (export pages and saved-output payloads carry bytes so).
 * @param {string} text
 * @returns {DataView}
 * @example base64ToDataView("AAA=").byteLength // 2
 */
export function base64ToDataView(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return new DataView(bytes.buffer);
}
