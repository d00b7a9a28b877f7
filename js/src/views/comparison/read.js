/**
 * Method comparison, read: the synced traits -> the plain state the view draws.
 *
 * @example
 *   const data = read(model); // {n, tokens, methods, scores, specialMask, ...}
 */
import { decodeArray, hasArray } from "../../lib/codec.js";

/** @typedef {import("../../comparison.js").ComparisonModel} ComparisonModel */

/** @param {import("../../lib/model.js").AnyModel<ComparisonModel>} model */
export function read(model) {
  const tokens = model.get("tokens") ?? [];
  const methods = model.get("methods") ?? [];
  const n = tokens.length;
  if (n === 0) throw new RangeError("there are no tokens to display");
  const scores = decodeArray(model.get("scores"));
  if (scores.shape[0] !== methods.length || scores.shape[1] !== n) {
    throw new RangeError(
      `scores have shape [${scores.shape.join(", ")}], expected [${methods.length} methods, ${n} tokens]`,
    );
  }
  const perToken = (name) => {
    const { values } = decodeArray(model.get(name));
    if (values.length !== n) throw new RangeError(`${name} has ${values.length} entries for ${n} tokens`);
    return values;
  };
  const signed = model.get("signed") ?? [];
  // payloads from before turns existed have none: every token is then in one turn without a role
  const turnIds = hasArray(model.get("turn_ids")) ? perToken("turn_ids") : null;
  return { n, tokens, methods, scores: scores.values, specialMask: perToken("special_mask"), wordIds: perToken("word_ids"), sentenceIds: perToken("sentence_ids"),
    turnIds, roles: model.get("turn_roles") ?? [], signed: methods.map((_, m) => signed[m] !== false), spaces: model.get("spaces_before") ?? [] }; // prettier-ignore
}
