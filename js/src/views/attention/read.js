/**
 * Attention, read: the synced traits -> the plain state the view draws (the thumbnails and pinned heads; the
 * full patterns come from the kernel on request, see patterns.js).
 *
 * @example
 *   const data = read(model); // {tokens, keyTokens, layers, heads, kvHeads, thumbs, pinned, keys, weights, ...}
 */
import { decodeArray } from "../../lib/codec.js";

/** @typedef {import("../../attention.js").AttentionModel} AttentionModel */
/**
 * @template {object} T
 * @typedef {import("../../lib/model.js").AnyModel<T>} AnyModel
 */

/** Read and check the synced data. @param {AnyModel<AttentionModel>} model */
export function read(model) {
  const tokens = model.get("tokens") ?? [];
  const keyTokens = model.get("key_tokens") ?? [];
  if (tokens.length === 0 || keyTokens.length === 0) throw new RangeError("there are no tokens to display");
  const layers = model.get("n_layers");
  const heads = model.get("n_heads");
  if (!(layers > 0 && heads > 0)) throw new RangeError(`the model has ${layers} layers and ${heads} heads`);
  const thumbs = decodeArray(model.get("thumbnails"));
  if (thumbs.shape[0] !== layers || thumbs.shape[1] !== heads)
    throw new RangeError(`thumbnails have shape [${thumbs.shape}], expected [${layers}, ${heads}, s, s]`);
  const pinned = model.get("pinned") ?? [];
  const keys = decodeArray(model.get("pinned_keys"));
  const weights = decodeArray(model.get("pinned_weights"));
  if (keys.shape[0] !== pinned.length || weights.shape[0] !== pinned.length)
    throw new RangeError(`pinned_keys/pinned_weights hold ${keys.shape[0]} heads, pinned lists ${pinned.length}`);
  return {
    tokens, keyTokens, layers, heads, kvHeads: Math.max(1, model.get("n_kv_heads") || 1),
    layerNames: model.get("layer_names") ?? [], kind: model.get("kind") || "self", modelName: model.get("model_name") || "",
    thumbs, pinned, keys, weights, topK: model.get("pinned_top_k") || keys.shape[2] || 0,
    generated: decodeArray(model.get("generated_mask")).values,
  }; // prettier-ignore
}

/** The cache / request key of a head or aggregation. */
export const patternKey = (layer, head) => `${layer}:${head}`;
