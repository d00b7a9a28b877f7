/**
 * Patching view, read: the synced traits -> the plain state the view draws (arrays decoded, each panel's shape and
 * offsets checked, its colour ranges found).
 *
 * @example
 *   const data = read(model); // {tokens, panels: [{point, L, U, P, cellStart, topStart, ...}], values, raw, ...}
 */
import { decodeArray } from "../../lib/codec.js";
import { maxAbs } from "./grid.js";

/** @typedef {import("../../patching.js").PatchingViewModel} PatchingViewModel */
/**
 * @template {object} T
 * @typedef {import("../../lib/model.js").AnyModel<T>} AnyModel
 */

/** @param {AnyModel<PatchingViewModel>} model */
export function read(model) {
  const tokens = model.get("tokens") ?? [];
  const points = model.get("panel_points") ?? [];
  const owners = model.get("panel_results") ?? [];
  const layers = model.get("panel_layers") ?? [];
  const units = model.get("panel_units") ?? [];
  const positions = model.get("panel_positions") ?? [];
  const cellOffsets = decodeArray(model.get("cell_offsets")).values;
  const topOffsets = decodeArray(model.get("top_offsets")).values;
  const values = decodeArray(model.get("values")).values;
  const raw = decodeArray(model.get("raw")).values;
  const spread = decodeArray(model.get("spread")).values;
  const top = decodeArray(model.get("top_vocab"));
  const K = top.shape[1] ?? 5;
  if (!points.length) throw new RangeError("there are no patched points to display");
  if (cellOffsets.length !== points.length + 1 || topOffsets.length !== points.length + 1)
    throw new RangeError(`${points.length} panels need ${points.length + 1} cell and top offsets, got ${cellOffsets.length} and ${topOffsets.length}`); // prettier-ignore
  const labels = model.get("result_labels") ?? [];
  const list = (name) => model.get(name) ?? [];
  const results = labels.map((label, r) => ({
    label, method: list("result_methods")[r] ?? "exact", direction: list("result_directions")[r] ?? "denoise",
    metric: list("result_metrics")[r] ?? "", clean: list("clean_metrics")[r], corrupt: list("corrupt_metrics")[r],
  })); // prettier-ignore
  const panels = points.map((point, p) => {
    const axis = positions[p]?.length ? positions[p] : tokens;
    const L = layers[p].length, U = units[p].length, P = axis.length; // prettier-ignore
    const cellStart = cellOffsets[p], cellEnd = cellOffsets[p + 1]; // prettier-ignore
    if (cellEnd - cellStart !== L * U * P)
      throw new RangeError(`panel ${p} (${point}) has ${cellEnd - cellStart} cells, expected ${L} layers × ${U} units × ${P} positions`); // prettier-ignore
    if (cellEnd > values.length)
      throw new RangeError(`panel ${p} (${point}) ends at cell ${cellEnd} of ${values.length}`);
    const rows = topOffsets[p + 1] - topOffsets[p];
    if (rows !== 0 && rows !== L * U * P) throw new RangeError(`panel ${p} (${point}) has ${rows} top-5 rows for ${L * U * P} cells`); // prettier-ignore
    if (!results[owners[p]])
      throw new RangeError(`panel ${p} (${point}) names result ${owners[p]} of ${results.length}`);
    return {
      index: p, point, result: owners[p], layers: layers[p], units: units[p], positions: axis, onTokens: !positions[p]?.length,
      L, U, P, cellStart, topStart: rows ? topOffsets[p] : -1,
      range: { normalised: maxAbs(values, cellStart, cellEnd, 1), raw: maxAbs(raw, cellStart, cellEnd) },
    }; // prettier-ignore
  });
  return {
    tokens, corruptTokens: model.get("corrupt_tokens") ?? [], panels, results, values, raw, spread,
    topVocab: top.values, topProbs: decodeArray(model.get("top_probs")).values, K, vocab: model.get("vocab") ?? [],
    topNote: model.get("top_note") ?? "", answer: model.get("answer") ?? "", foil: model.get("foil") ?? "",
    nPairs: model.get("n_pairs") ?? 1, modelName: model.get("model_name") ?? "",
    agreement: { points: list("agreement_points"), spearman: list("agreement_spearman"), overlap: list("agreement_overlap"), k: model.get("agreement_k") ?? 0 },
  }; // prettier-ignore
}
