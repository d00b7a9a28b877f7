/**
 * Steering view, read: the synced traits -> the plain state the view draws (arrays decoded, lengths checked).
 *
 * @example
 *   const data = read(model); // {scales, metricMean, metricSpread, damage, steered, changed, ..., S}
 */
import { decodeArray } from "../../lib/codec.js";

/** @typedef {import("../../steering.js").SteeringViewModel} SteeringViewModel */
/**
 * @template {object} T
 * @typedef {import("../../lib/model.js").AnyModel<T>} AnyModel
 */

const values = (model, name) => {
  const raw = model.get(name);
  return raw ? Array.from(decodeArray(raw).values) : [];
};

/** @param {AnyModel<SteeringViewModel>} model */
export function read(model) {
  const scales = values(model, "scales");
  const S = scales.length;
  if (S === 0) throw new RangeError("there are no scales to display");
  const steered = model.get("steered_tokens") ?? [];
  const changed = model.get("changed") ?? [];
  const metricMean = values(model, "metric_mean");
  const metricSpread = values(model, "metric_spread");
  const damage = values(model, "damage");
  for (const [name, list] of [["steered_tokens", steered], ["changed", changed], ["metric_mean", metricMean], ["metric_spread", metricSpread], ["damage", damage]]) {
    if (list.length !== S) throw new RangeError(`${name} has ${list.length} entries for ${S} scales; expected one per scale`);
  } // prettier-ignore
  steered.forEach((tokens, k) => {
    if ((changed[k] ?? []).length !== tokens.length)
      throw new RangeError(`changed[${k}] has ${changed[k].length} entries for ${tokens.length} tokens`);
  });
  return {
    prompt: model.get("prompt") ?? "", layer: model.get("layer") ?? "", scaleMeaning: model.get("scale_meaning") ?? "",
    promptTokens: model.get("prompt_tokens") ?? [], unsteered: model.get("unsteered_tokens") ?? [], steered, changed,
    scales, metricMean, metricSpread, damage, metricName: model.get("metric_name") ?? "",
    damageTokens: model.get("damage_tokens") ?? 0, positions: model.get("positions") ?? "generated", S,
  }; // prettier-ignore
}
