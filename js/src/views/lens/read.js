/**
 * Logit lens, read: the synced traits -> the plain state the view draws (arrays decoded, shapes checked).
 *
 * @example
 *   const data = read(model); // {tokens, layers, lenses, topVocab, ..., dims: {N, L, T, K, M}}
 */
import { decodeArray } from "../../lib/codec.js";

/** @typedef {import("../../lens.js").LensModel} LensModel */
/**
 * @template {object} T
 * @typedef {import("../../lib/model.js").AnyModel<T>} AnyModel
 */

/** @param {AnyModel<LensModel>} model */
export function read(model) {
  const tokens = model.get("tokens") ?? [];
  const layers = model.get("layers") ?? [];
  const lenses = model.get("lenses") ?? [];
  const top = decodeArray(model.get("top_vocab"));
  const [N, L, T, K] = top.shape;
  if (T !== tokens.length || L !== layers.length || N !== lenses.length) {
    throw new RangeError(
      `top_vocab has shape [${top.shape.join(", ")}], expected [${lenses.length} lenses, ${layers.length} layers, ${tokens.length} positions, k]`,
    );
  }
  if (T === 0 || L === 0) throw new RangeError("there are no positions or layers to display");
  const targetProbs = decodeArray(model.get("target_probs"));
  const M = targetProbs.shape[3];
  return {
    tokens, layers, lenses, vocab: model.get("vocab") ?? [], targetLabels: model.get("target_labels") ?? [],
    topVocab: top.values, topProbs: decodeArray(model.get("top_probs")).values, kl: decodeArray(model.get("kl")).values,
    targetVocab: decodeArray(model.get("target_vocab")).values, targetProbs: targetProbs.values,
    targetRanks: decodeArray(model.get("target_ranks")).values, generated: decodeArray(model.get("generated_mask")).values,
    vocabSize: model.get("vocab_size") || 2, modelName: model.get("model_name") ?? "", dims: { N, L, T, K, M },
  }; // prettier-ignore
}
