import { describe, expect, it } from "vitest";
import { decodeArray, hasArray } from "../src/lib/codec.js";
import { dataViewAt } from "./fake_model.js";

describe("decodeArray", () => {
  it("honours a non-zero, aligned byteOffset of a DataView", () => {
    const source = new Float32Array([0.5, -1.25, 3, 7.75, -0.125, 2]);
    const view = dataViewAt(source, 8);
    expect(view.byteOffset).toBe(8);
    const { values, shape } = decodeArray({ dtype: "float32", shape: [2, 3], data: view });
    expect(shape).toEqual([2, 3]);
    expect(Array.from(values)).toEqual([0.5, -1.25, 3, 7.75, -0.125, 2]);
  });

  it("copies when the byteOffset is not aligned to the element size", () => {
    const source = new Int32Array([-1, 0, 2, 70000]);
    const view = dataViewAt(source, 3);
    const { values } = decodeArray({ dtype: "int32", shape: [4], data: view });
    expect(values).toBeInstanceOf(Int32Array);
    expect(Array.from(values)).toEqual([-1, 0, 2, 70000]);
  });

  it("accepts plain ArrayBuffers and typed arrays", () => {
    const bytes = new Uint8Array([1, 0, 1]);
    expect(Array.from(decodeArray({ dtype: "bool", shape: [3], data: bytes.buffer }).values)).toEqual([1, 0, 1]);
    expect(Array.from(decodeArray({ dtype: "uint8", shape: [3], data: bytes }).values)).toEqual([1, 0, 1]);
  });

  it("rejects size mismatches and unknown dtypes with readable errors", () => {
    const view = dataViewAt(new Float32Array([1, 2, 3]), 4);
    expect(() => decodeArray({ dtype: "float32", shape: [2, 2], data: view })).toThrow(/12 bytes but shape \[2, 2\]/);
    expect(() => decodeArray({ dtype: "complex64", shape: [1], data: view })).toThrow(/unsupported array dtype/);
    expect(() => decodeArray(undefined)).toThrow(/expected an array payload/);
    expect(() => decodeArray({ dtype: "float32", shape: [1], data: [1] })).toThrow(/must be binary/);
  });
});

describe("hasArray", () => {
  it("tells an array payload from an absent one ({} from the kernel, null or undefined from older payloads)", () => {
    expect(hasArray({ dtype: "int8", shape: [0], data: new DataView(new ArrayBuffer(0)) })).toBe(true);
    expect([hasArray({}), hasArray(null), hasArray(undefined), hasArray([])]).toEqual([false, false, false, false]);
  });
});
