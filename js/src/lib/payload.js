/**
 * Saved-output payloads: the `application/vnd.interp-widgets.v1+json` output every view writes beside its widget
 * view and static picture (Python `interp_widgets/widgets/_mime.py`). `readPayload` checks one against the view
 * schema (`view_schema.json`, generated from the Python view classes by `scripts/view_schema.py`) and decodes it
 * into the traits a view's render reads: base64 arrays and bytes become DataViews, as anywidget delivers buffers.
 *
 * The payload may come from an untrusted notebook, so nothing in it is trusted: every value must have the type the
 * schema gives its field (strings are strings, ids are integers, arrays have a known dtype, the declared shape and
 * exactly the bytes it needs), unknown data fields are refused, and objects are rebuilt key by key (a `__proto__`
 * key stays an ordinary property). The views put strings into the page only as text (lib/dom.js).
 *
 * @example
 *   const read = readPayload(output.data[MIME_TYPE]);
 *   if (read.kind === "view") render({ model: createModelShim(read.traits), el });
 */
import { base64ToDataView as decodeBase64 } from "./codec.js";
import SCHEMA from "./view_schema.json";

/** The MIME type of the payload. */
export const MIME_TYPE = SCHEMA.mime_type;
/** The payload envelope version this code reads. */
export const FORMAT = SCHEMA.format;
/** ipywidgets' output type, next to which the payload is saved. */
export const WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json";
/** Deepest nesting a payload may use (the schema's deepest type is 6 levels). */
const MAX_DEPTH = 12;

/** A payload that does not match the view schema. */
export class PayloadError extends Error {
  constructor(message) {
    super(message);
    this.name = "PayloadError";
  }
}

const BYTES_PER_ELEMENT = {
  float32: 4,
  float64: 8,
  int8: 1,
  uint8: 1,
  int16: 2,
  uint16: 2,
  int32: 4,
  uint32: 4,
  bool: 1,
};
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function kindOf(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  if (typeof value === "object") return "an object";
  return `a ${typeof value}`;
}

function fail(path, message) {
  throw new PayloadError(`${path} ${message}`);
}

function isPlainObject(value) {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function expectObject(value, path) {
  if (!isPlainObject(value)) fail(path, `must be an object, got ${kindOf(value)}`);
}

function own(object, key) {
  return Object.prototype.hasOwnProperty.call(object, key);
}

/** Decode base64 text (checked: nothing but base64) into a DataView over a fresh buffer. */
function base64ToDataView(text, path) {
  if (typeof text !== "string" || !BASE64.test(text)) fail(path, "must be base64 text");
  return decodeBase64(text);
}

function readArray(value, type, path) {
  if (value === null && type.absent) return {}; // the view data writes an absent array as null, the trait as {}
  expectObject(value, path);
  const keys = Object.keys(value);
  if (keys.length === 0 && type.absent) return {};
  for (const key of keys)
    if (!["dtype", "shape", "data"].includes(key)) fail(path, `has an unknown key ${JSON.stringify(key)}`);
  if (!type.array.includes(value.dtype))
    fail(path, `has dtype ${JSON.stringify(value.dtype)}; expected one of ${type.array.join(", ")}`);
  const { shape } = value;
  if (!Array.isArray(shape) || shape.length !== type.ndim || !shape.every((n) => Number.isSafeInteger(n) && n >= 0)) {
    fail(path, `must have a shape of ${type.ndim} non-negative integers, got ${JSON.stringify(shape)?.slice(0, 60)}`);
  }
  const data = base64ToDataView(value.data, `${path}.data`);
  const size = shape.reduce((a, b) => a * b, 1);
  if (data.byteLength !== size * BYTES_PER_ELEMENT[value.dtype]) {
    fail(
      path,
      `holds ${data.byteLength} bytes but shape [${shape.join(", ")}] of ${value.dtype} needs ${size * BYTES_PER_ELEMENT[value.dtype]}`,
    );
  }
  return { dtype: value.dtype, shape: [...shape], data };
}

/**
 * `value` checked against schema type `type` and decoded (see `trait_schema` in Python for the type language).
 * @param {unknown} value
 * @param {any} type
 * @param {string} path  where `value` sits, for the error message
 */
export function checkValue(value, type, path = "payload", depth = 0) {
  if (depth > MAX_DEPTH) fail(path, "is nested too deeply");
  if (typeof type === "string") {
    switch (type) {
      case "str":
        if (typeof value !== "string") fail(path, `must be a string, got ${kindOf(value)}`);
        return value;
      case "int":
        if (!Number.isSafeInteger(value)) fail(path, `must be an integer, got ${kindOf(value)}`);
        return value;
      case "num": // JSON has no NaN: null stands for it
        if (value === null) return NaN;
        if (typeof value !== "number" || !Number.isFinite(value)) fail(path, `must be a number, got ${kindOf(value)}`);
        return value;
      case "bool":
        if (typeof value !== "boolean") fail(path, `must be true or false, got ${kindOf(value)}`);
        return value;
      case "bytes":
        expectObject(value, path);
        if (Object.keys(value).length !== 1 || !own(value, "base64")) fail(path, 'must be {"base64": text}');
        return base64ToDataView(value.base64, `${path}.base64`);
      default:
        throw new Error(`unknown schema type ${type}`);
    }
  }
  if (own(type, "nullable")) return value === null ? null : checkValue(value, type.nullable, path, depth + 1);
  if (own(type, "oneOf")) {
    // the first alternative the value matches (for example a head index or the name of an aggregation)
    for (const alternative of type.oneOf) {
      try {
        return checkValue(value, alternative, path, depth + 1);
      } catch (error) {
        if (!(error instanceof PayloadError)) throw error;
      }
    }
    fail(path, `matches none of ${type.oneOf.map((t) => JSON.stringify(t)).join(", ")}`);
  }
  if (own(type, "enum")) {
    if (!type.enum.includes(value)) fail(path, `must be one of ${type.enum.map((v) => JSON.stringify(v)).join(", ")}`);
    return value;
  }
  if (own(type, "list")) {
    if (!Array.isArray(value)) fail(path, `must be a list, got ${kindOf(value)}`);
    return value.map((item, i) => checkValue(item, type.list, `${path}[${i}]`, depth + 1));
  }
  if (own(type, "map")) {
    expectObject(value, path);
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, checkValue(v, type.map, `${path}[${JSON.stringify(k)}]`, depth + 1)]),
    );
  }
  if (own(type, "object")) return checkObject(value, type.object, path, depth, type);
  if (own(type, "array")) return readArray(value, type, path);
  throw new Error(`unknown schema type ${JSON.stringify(type)}`);
}

function checkObject(value, fields, path, depth, { required, open, defaults } = {}) {
  expectObject(value, path);
  const needed = required ?? Object.keys(fields);
  const out = [];
  for (const key of needed) {
    if (own(value, key)) continue;
    // A field added since the payload was written (an older data version, or an older interp-widgets) reads as its
    // default, as Python's ViewData.from_json reads it.
    if (defaults && own(defaults, key))
      out.push([key, checkValue(JSON.parse(JSON.stringify(defaults[key])), fields[key], `${path}.${key}`, depth + 1)]);
    else fail(path, `lacks ${JSON.stringify(key)}`);
  }
  for (const [key, item] of Object.entries(value)) {
    if (!own(fields, key)) {
      if (open) continue; // other keys are dropped: the views read only the declared ones
      fail(path, `has an unknown field ${JSON.stringify(key)}`);
    }
    out.push([key, checkValue(item, fields[key], `${path}.${key}`, depth + 1)]);
  }
  return Object.fromEntries(out);
}

/**
 * What a saved output holds, checked against the schema:
 *   {kind: "view", view, widget, traits}   the traits of a view (data and view state), ready for a model shim;
 *   {kind: "newer", view, widget, message} written by a newer interp_widgets than this code reads;
 *   {kind: "omitted", view, widget, bytes, cap}  the data was over the per-output cap, only the picture was saved;
 *   {kind: "failed", view, widget, message}      Python could not build the payload.
 * Throws PayloadError when the payload does not match the schema.
 * @param {unknown} payload
 */
export function readPayload(payload) {
  expectObject(payload, "the output");
  const { format, view, version } = payload;
  if (!Number.isSafeInteger(format) || format < 1)
    fail("its format", `must be a positive integer, got ${kindOf(format)}`);
  if (format > FORMAT) {
    return {
      kind: "newer",
      view: String(view ?? ""),
      widget: "",
      message: `This output was written by a newer interp-widgets (payload format ${format}; this extension reads format ${FORMAT}).`,
    };
  }
  if (typeof view !== "string") fail("its view", `must be a string, got ${kindOf(view)}`);
  if (!Number.isSafeInteger(version) || version < 1)
    fail("its version", `must be a positive integer, got ${kindOf(version)}`);
  const spec = own(SCHEMA.views, view) ? SCHEMA.views[view] : null;
  if (spec === null) {
    return {
      kind: "newer",
      view,
      widget: "",
      message: `This output holds a view this extension does not know (${JSON.stringify(view)}): it was probably written by a newer interp-widgets.`,
    };
  }
  const widget = spec.widget;
  if (version > spec.version) {
    return {
      kind: "newer",
      view,
      widget,
      message: `This ${widget} output has data format version ${version}; this extension reads up to version ${spec.version}.`,
    };
  }
  if (own(payload, "omitted")) {
    const omitted = checkObject(payload.omitted, { bytes: "int", cap: "int" }, "its omitted record", 0);
    return { kind: "omitted", view, widget, ...omitted };
  }
  if (own(payload, "failed"))
    return { kind: "failed", view, widget, message: checkValue(payload.failed, "str", "its failure") };
  const data = checkObject(payload.data, spec.data, "data", 0, { defaults: spec.defaults.data });
  expectObject(payload.state, "state");
  const state = checkObject(payload.state, spec.state, "state", 0, { open: true, defaults: spec.defaults.state });
  return { kind: "view", view, widget, traits: { ...data, ...state } };
}

let snapshots = 0;

/**
 * The traits of a saved output for its own model shim. Each saved output is its own snapshot: views that share a
 * browser-side store by stream id (the monitor) get one per output, so two outputs of one monitor saved at
 * different times do not overwrite each other.
 * @param {Record<string, unknown>} traits  from readPayload
 */
export function snapshotTraits(traits) {
  if (typeof traits.stream_id === "string")
    return { ...traits, stream_id: `${traits.stream_id}\u0000saved-output-${(snapshots += 1)}` };
  return traits;
}

/** Every view the schema knows, by view (bundle) name: its widget class and data version. */
export function knownViews() {
  return Object.fromEntries(
    Object.entries(SCHEMA.views).map(([view, spec]) => [view, { widget: spec.widget, version: spec.version }]),
  );
}

/**
 * How to keep an over-cap view interactive, for the note shown with its picture.
 * @param {{widget: string, bytes: number, cap: number}} read
 */
export function omittedMessage({ widget, bytes, cap }) {
  const mb = (n) => `${(n / (1024 * 1024)).toFixed(n < 1024 * 1024 ? 2 : 1)} MB`;
  return (
    `This ${widget || "view"} holds ${mb(bytes)} of data, over the ${mb(cap)} cap on saved outputs, so only its picture was saved. ` +
    'To keep it interactive, export it to its own page with widget.export_html("view.html") (or interp-widgets export for the notebook), ' +
    "or raise the cap before displaying it: interp_widgets.widgets.set_output_cap(4_000_000)."
  );
}
