// Test doubles for the anywidget model and binary buffers.
import { vi } from "vitest";

/**
 * A fake anywidget model: a Map of event handlers, `get` from a plain object, `set` updating it and
 * firing `change:<name>` synchronously (as Backbone does), `save_changes`/`send` as spies.
 */
export function fakeModel(initial) {
  const state = { ...initial };
  const handlers = new Map();
  const model = {
    state,
    handlers,
    get: vi.fn((name) => state[name]),
    set: vi.fn((name, value) => {
      state[name] = value;
      for (const handler of [...(handlers.get(`change:${name}`) ?? [])]) handler();
    }),
    on: vi.fn((event, handler) => {
      if (!handlers.has(event)) handlers.set(event, new Set());
      handlers.get(event).add(handler);
    }),
    off: vi.fn((event, handler) => handlers.get(event)?.delete(handler)),
    save_changes: vi.fn(),
    send: vi.fn(),
    listenerCount() {
      let count = 0;
      for (const set of handlers.values()) count += set.size;
      return count;
    },
  };
  return model;
}

/**
 * Wrap a typed array as anywidget delivers buffers: a DataView that starts `offset` bytes into a
 * larger ArrayBuffer (garbage before and after), so a decoder ignoring byteOffset reads wrong values.
 */
export function dataViewAt(typed, offset) {
  const buffer = new ArrayBuffer(offset + typed.byteLength + 16);
  new Uint8Array(buffer).fill(0xab);
  new Uint8Array(buffer, offset, typed.byteLength).set(
    new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength),
  );
  return new DataView(buffer, offset, typed.byteLength);
}

/** `{dtype, shape, data}` payload whose data is a DataView at a non-zero byteOffset. */
export function payload(typed, dtype, shape, offset = 12) {
  return { dtype, shape, data: dataViewAt(typed, offset) };
}

/** Let queued microtasks (coalesced redraws) and MutationObserver callbacks run. */
export function settle() {
  return new Promise((resolve) => setTimeout(resolve, 0));
}
