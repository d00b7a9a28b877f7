/**
 * Concept browser, read: the synced traits -> the plain state the view draws (columns decoded once per data
 * change, not per keystroke or page), and the pure functions over it (search, filter and sort order).
 *
 * @example
 *   const data = read(model);
 *   const order = visibleConcepts(data, { sortBy: "density", descending: true, search: "", hideDead: false });
 */
import { decodeArray } from "../../lib/codec.js";
import { labelRanks, sortIndices } from "../../lib/controls.js";

/** @typedef {import("../../concept_browser.js").ConceptBrowserModel} ConceptBrowserModel */
/**
 * @template {object} T
 * @typedef {import("../../lib/model.js").AnyModel<T>} AnyModel
 */

export const SORT_KEYS = {
  index: "concept id",
  label: "label",
  density: "density",
  max: "max activation",
  importance: "importance",
  abs_importance: "|importance|",
  detection: "label detection score",
  fuzzing: "label fuzzing score",
};
/** The sort keys that need scored labels (score_labels in Python). */
export const LABEL_SCORE_KEYS = ["detection", "fuzzing"];
/**
 * Concept ids after search, dead filter, label-score filter (`minScore`: both scores at least this; an unscored
 * label is left out while it is above 0) and sort (ties keep id order, NaN values last); the same rule as
 * ConceptBrowser.visible_order() in Python. `haystack` (optional, from searchText) holds each concept's lower-cased
 * label and top tokens, so that a keystroke over 16k concepts does not lower-case them again.
 */
export function visibleConcepts(
  { labels, topTokens, density, maxActivation, importance, detection, fuzzing, haystack },
  { sortBy, descending, search, hideDead, minScore = 0 },
) {
  const needle = (search ?? "").toLowerCase();
  const ranked = {
    index: null,
    label: () => {
      const ranks = labelRanks(labels);
      return (c) => ranks.get(labels[c]);
    },
    density: () => (c) => density[c],
    max: () => (c) => maxActivation[c],
    importance: () => (c) => (importance ? importance[c] : NaN),
    abs_importance: () => (c) => (importance ? Math.abs(importance[c]) : NaN),
    detection: () => (c) => (detection ? detection[c] : NaN),
    fuzzing: () => (c) => (fuzzing ? fuzzing[c] : NaN),
  };
  if (!(sortBy in ranked))
    throw new RangeError(`unknown sort key "${sortBy}"; use ${Object.keys(SORT_KEYS).join(", ")}`);
  const text = haystack ?? searchText(labels, topTokens);
  const keep = [];
  for (let c = 0; c < labels.length; c += 1) {
    if (hideDead && !(density[c] > 0)) continue;
    if (needle && !text[c].includes(needle)) continue;
    if (minScore > 0 && !(detection?.[c] >= minScore && fuzzing?.[c] >= minScore)) continue;
    keep.push(c);
  }
  if (sortBy === "index") return descending ? keep.reverse() : keep; // ids are already in order
  return sortIndices(keep, ranked[sortBy](), descending);
}

/** Each concept's lower-cased label and top tokens, separated so that a search never matches across them. */
export function searchText(labels, topTokens) {
  return labels.map((label, c) => [label, ...(topTokens[c] ?? [])].join("\u0000").toLowerCase());
}

/** The first characters of an input text, rebuilt from its tokens and the gaps before them. */
export function textPreview(tokens, gaps, limit = 40) {
  const text = tokens.map((t, k) => (k ? (gaps[k] ?? "") : "") + t).join("");
  return text.length > limit ? `${text.slice(0, limit)}\u2026` : text;
}

/** @param {AnyModel<ConceptBrowserModel>} model */
export function read(model) {
  const labels = model.get("labels") ?? [];
  if (labels.length === 0) throw new RangeError("there are no concepts to browse");
  const column = (name) => {
    const payload = model.get(name);
    if (!payload || !payload.data) return null;
    const { values } = decodeArray(payload);
    if (values.length !== labels.length)
      throw new RangeError(`${name} needs ${labels.length} values (one per concept), got ${values.length}`);
    return values;
  };
  const tokens = model.get("text_tokens") ?? [];
  const topTokens = model.get("top_tokens") ?? labels.map(() => []);
  const starts = [];
  tokens.reduce((start, t) => (starts.push(start), start + t.length), 0);
  const topPayload = model.get("text_top_concepts");
  const top = topPayload?.data ? decodeArray(topPayload) : null;
  return {
    labels,
    topTokens,
    haystack: searchText(labels, topTokens),
    density: column("density"),
    maxActivation: column("max_activation"),
    importance: column("importance"),
    detection: column("label_detection"),
    fuzzing: column("label_fuzzing"),
    scorer: model.get("label_scorer") ?? "",
    detectionChance: column("label_detection_chance"),
    fuzzingChance: column("label_fuzzing_chance"),
    control: {
      n: Number(model.get("label_control_n") ?? 0),
      wins: Number(model.get("label_control_wins") ?? 0),
      ties: Number(model.get("label_control_ties") ?? 0),
      threshold: Number(model.get("label_control_threshold") ?? 0.7),
      discriminates: Boolean(model.get("label_discriminates")),
    },
    texts: { tokens, gaps: model.get("text_gaps") ?? [], starts, top: top?.values, topWidth: top?.shape[1] ?? 0, topValues: top ? decodeArray(model.get("text_top_values")).values : null },
  }; // prettier-ignore
}
