/**
 * Example list, read: the synced traits -> the plain state the view draws, and the pure functions over it
 * (filter and sort order, units of one example).
 *
 * @example
 *   const data = read(model);
 *   const order = visibleOrder(data, { sortBy: "index", descending: false, filterLabel: "", filterOutcome: "all" });
 */
import { buildUnits, roleStarts, unitScores } from "../../lib/aggregate.js";
import { decodeArray, hasArray } from "../../lib/codec.js";
import { labelRanks, sortIndices } from "../../lib/controls.js";

/** @typedef {import("../../example_list.js").ExampleListModel} ExampleListModel */
/**
 * @template {object} T
 * @typedef {import("../../lib/model.js").AnyModel<T>} AnyModel
 */

export const SORT_KEYS = {
  index: "input order",
  confidence: "confidence",
  max_attribution: "max |attribution|",
  label: "predicted label",
};

/**
 * Example indices after filtering and sorting (ties keep input order); the same rule as
 * ExampleListWidget.visible_order() in Python.
 */
export function visibleOrder(
  { predicted, trueLabels, confidence, maxAttribution },
  { sortBy, descending, filterLabel, filterOutcome },
) {
  const keep = predicted
    .map((_, i) => i)
    .filter((i) => !filterLabel || predicted[i] === filterLabel)
    .filter(
      (i) =>
        filterOutcome === "all" ||
        (trueLabels[i] !== "" && (predicted[i] === trueLabels[i]) === (filterOutcome === "correct")),
    );
  const ranks = labelRanks(predicted);
  const key = {
    index: (i) => i,
    label: (i) => ranks.get(predicted[i]),
    confidence: (i) => (confidence[i] === null || confidence[i] === undefined ? -Infinity : confidence[i]),
    max_attribution: (i) => maxAttribution[i],
  }[sortBy];
  if (!key) throw new RangeError(`unknown sort key "${sortBy}"; use ${Object.keys(SORT_KEYS).join(", ")}`);
  return sortIndices(keep, key, descending);
}

/**
 * The page a paged list shows (the kernel holds the whole list and sends one page): `null` when the widget holds
 * every example. `pending` is true while the page asked for is not the one held (the kernel has not answered: it
 * is busy, or there is none, as in a saved output).
 * @example pagedView({ total: 25, first: 10, held: 10, page: 1, pageSize: 10 }) // {page: 1, pages: 3, pending: false}
 */
export function pagedView({ total, first, held, page, pageSize }) {
  if (!(total > held)) return null;
  const size = Math.max(1, pageSize || 10);
  const pages = Math.max(1, Math.ceil(total / size));
  const heldPage = Math.floor(first / size);
  const asked = Math.min(Math.max(page ?? 0, 0), pages - 1);
  return { page: heldPage, pages, pending: asked !== heldPage, asked };
}

/** @param {AnyModel<ExampleListModel>} model */
export function read(model) {
  const tokens = model.get("tokens") ?? [];
  if (tokens.length === 0) throw new RangeError("there are no examples to list");
  const total = tokens.reduce((sum, t) => sum + t.length, 0);
  const concatenated = (name) => {
    const { values } = decodeArray(model.get(name));
    if (values.length !== total)
      throw new RangeError(`${name} needs ${total} entries (all tokens of all examples), got ${values.length}`);
    return values;
  };
  const starts = [];
  tokens.reduce((start, t) => (starts.push(start), start + t.length), 0);
  return {
    tokens, starts,
    scores: concatenated("scores"),
    special: concatenated("special_mask"),
    wordIds: concatenated("word_ids"),
    sentenceIds: concatenated("sentence_ids"),
    // payloads from before turns existed have none: every example is then one turn without a role
    turnIds: hasArray(model.get("turn_ids")) ? concatenated("turn_ids") : null,
    roles: model.get("turn_roles") ?? [],
    spaces: model.get("spaces_before") ?? [],
    predicted: model.get("predicted") ?? [],
    trueLabels: model.get("true_labels") ?? [],
    confidence: model.get("confidence") ?? [],
    maxAttribution: model.get("max_attribution") ?? [],
    signed: model.get("signed") !== false,
    method: model.get("method") ?? "",
  }; // prettier-ignore
}

/**
 * Units (token indices within the example), their score sums and the role label of each unit that starts a chat
 * turn (`Map(unit → role)`, empty for a plain text) for example `i` at `granularity`.
 * @returns {{units: number[][], sums: Float64Array, starts: Map<number, string>}}
 */
export function exampleUnits(data, i, granularity) {
  const [start, end] = [data.starts[i], data.starts[i] + data.tokens[i].length];
  const slice = (values) => values.subarray(start, end);
  const turnIds = data.turnIds ? slice(data.turnIds) : null;
  const specialMask = slice(data.special);
  const units = buildUnits({
    granularity,
    wordIds: slice(data.wordIds),
    sentenceIds: slice(data.sentenceIds),
    turnIds,
    specialMask,
    showSpecial: false,
  });
  const starts = roleStarts(units, turnIds, specialMask, data.roles?.[i] ?? []);
  return { units, sums: unitScores(units, slice(data.scores), 0, end - start), starts };
}
