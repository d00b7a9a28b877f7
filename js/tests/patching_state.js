// A filled model state of the patching view: two tokens with markup, a resid_pre panel (2 layers × 2 positions) and a
// heads panel (2 layers × 2 heads × 2 positions), every cell's top-5 stored; `options` override traits.
import { payload } from "./fake_model.js";

const f32 = (values, shape = [values.length]) => payload(Float32Array.from(values), "float32", shape);
const i32 = (values, shape = [values.length]) => payload(Int32Array.from(values), "int32", shape);
const bool = (values) => payload(Uint8Array.from(values), "bool", [values.length]);

/** Normalised values of the 12 cells: resid_pre (l, p) = 0.1·(2l + p); head (l, h, p) = 0.5 + 0.1·(4l + 2h + p). */
export const VALUES = [0, 0.1, 0.2, 0.3, ...Array.from({ length: 8 }, (_, i) => 0.5 + 0.1 * i)];
/** Top-5 of cell c: vocab indices (c + k) % 3, probabilities 0.5, 0.2, 0.1, 0.05, 0.01. */
export const TOP = Array.from({ length: 12 }, (_, c) => [0, 1, 2, 3, 4].map((k) => (c + k) % 3));
export const VOCAB = ["<img src=x onerror=alert(1)>", " Paris", "\n"];

export function patchingState(options = {}) {
  return {
    error: "", tokens: ["<b>", "&x"], spaces_before: ["", " "], special_mask: bool([0, 0]), word_ids: i32([0, 1]),
    sentence_ids: i32([0, 0]), turn_ids: null, turn_roles: [], corrupt_tokens: ["<i>", "&y"],
    panel_points: ["resid_pre", "head"], panel_results: [0, 0], panel_layers: [["0", "1"], ["0", "1"]],
    panel_units: [["stream"], ["H0", "H1"]], panel_positions: [[], []], cell_offsets: i32([0, 4, 12]),
    values: f32(VALUES), raw: f32(VALUES.map((v) => 2 + 3 * v)), spread: f32(VALUES.map(() => 0)),
    top_offsets: i32([0, 4, 12]), top_vocab: i32(TOP.flat(), [12, 5]),
    top_probs: f32(TOP.flatMap(() => [0.5, 0.2, 0.1, 0.05, 0.01]), [12, 5]), vocab: VOCAB, top_note: "",
    result_labels: ["exact"], result_methods: ["exact"], result_directions: ["denoise"], result_metrics: ["logit_diff"],
    clean_metrics: [5], corrupt_metrics: [2], agreement_points: [], agreement_spearman: [], agreement_overlap: [],
    agreement_k: 0, answer: " Paris", foil: " Rome", n_pairs: 1, model_name: "m", scale: "normalised",
    selected_cell: [], unit_position: -1, ...options,
  }; // prettier-ignore
}
