/**
 * Token highlighter, read: the synced traits -> the plain state the view draws (checked; a readable error when
 * the traits are inconsistent).
 *
 * @example
 *   const data = read(model); // {n, tokens, spaces, scores, labels, ...}
 */
import { decodeArray, hasArray } from "../../lib/codec.js";

/** @typedef {import("../../token_highlight.js").TokenHighlightModel} TokenHighlightModel */
/**
 * @template {object} T
 * @typedef {import("../../lib/model.js").AnyModel<T>} AnyModel
 */

/** Index of the unit holding token `i` (-1 if none is shown). */
export function unitOfToken(units, i) {
  if (i < 0) return -1;
  return units.findIndex((unit) => unit[0] <= i && i <= unit.at(-1) && unit.includes(i));
}

/**
 * @param {AnyModel<TokenHighlightModel>} model
 * @param {"special_mask" | "word_ids" | "sentence_ids" | "turn_ids"} name
 * @param {number} n
 */
function perToken(model, name, n) {
  const { values } = decodeArray(model.get(name));
  if (values.length !== n) throw new RangeError(`${name} has ${values.length} entries for ${n} tokens`);
  return values;
}

/**
 * Read and check the synced data; throws a readable error when it is inconsistent.
 * @param {AnyModel<TokenHighlightModel>} model
 */
export function read(model) {
  const tokens = model.get("tokens") ?? [];
  const n = tokens.length;
  if (n === 0) throw new RangeError("there are no tokens to display");
  const spaces = model.get("spaces_before") ?? [];
  if (spaces.length !== n) throw new RangeError(`spaces_before has ${spaces.length} entries for ${n} tokens`);
  const scores = decodeArray(model.get("scores"));
  if (scores.shape.length !== 2 || scores.shape[1] !== n) {
    throw new RangeError(`scores have shape [${scores.shape.join(", ")}], expected [n_targets, ${n}]`);
  }
  const labels = model.get("target_labels") ?? [];
  if (labels.length !== scores.shape[0]) {
    throw new RangeError(`${labels.length} target labels for ${scores.shape[0]} rows of scores`);
  }
  return {
    n,
    tokens,
    spaces,
    scores: scores.values,
    labels,
    probs: model.get("target_probs") ?? [],
    completeness: model.get("completeness_error") ?? [],
    specialMask: perToken(model, "special_mask", n),
    wordIds: perToken(model, "word_ids", n),
    sentenceIds: perToken(model, "sentence_ids", n),
    // payloads from before turns existed have none: every token is then in one turn without a role
    turnIds: hasArray(model.get("turn_ids")) ? perToken(model, "turn_ids", n) : null,
    roles: model.get("turn_roles") ?? [],
    method: model.get("method") ?? "",
    meaning: model.get("score_meaning") ?? "",
    signed: model.get("signed") !== false,
  };
}
