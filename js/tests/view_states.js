// One filled model state of every view (its data and view-state traits), shared by the contract and canvas tests.
import attention from "../src/attention.js";
import circuit from "../src/circuit.js";
import comparison from "../src/comparison.js";
import conceptBrowser from "../src/concept_browser.js";
import examples from "../src/example_list.js";
import generation from "../src/generation.js";
import lens from "../src/lens.js";
import monitor from "../src/monitor.js";
import patching from "../src/patching.js";
import steering from "../src/steering.js";
import tokenHighlight from "../src/token_highlight.js";
import { payload } from "./fake_model.js";
import { patchingState } from "./patching_state.js";

const f32 = (values, shape = [values.length]) => payload(Float32Array.from(values), "float32", shape);
const i32 = (values, shape = [values.length]) => payload(Int32Array.from(values), "int32", shape);
const bool = (values) => payload(Uint8Array.from(values), "bool", [values.length]);
const common = { error: "", encoding: "colour", high_contrast: false, selected_token: -1, hovered_token: -1 };

export const VIEWS = [
  {
    file: "token_highlight.js", model: "TokenHighlightModel", widget: tokenHighlight,
    state: { ...common, tokens: ["a", "b", "c"], spaces_before: ["", " ", " "], special_mask: bool([0, 0, 0]), word_ids: i32([0, 1, 2]),
      sentence_ids: i32([0, 0, 0]), turn_ids: i32([0, 0, 1]), turn_roles: ["user", "assistant"],
      scores: f32([1, -1, 0.5, 0, 2, 1], [2, 3]), target_labels: ["x", "y"], target_probs: [0.6, 0.4],
      completeness_error: [0.1, null], method: "saliency", score_meaning: "sum", signed: true, selected_target: 0, granularity: "token",
      show_special_tokens: false, shared_scale: false },
  },
  {
    file: "generation.js", model: "GenerationModel", widget: generation,
    state: { ...common, tokens: ["p", "q", "g1", "g2"], spaces_before: ["", " ", " ", " "], special_mask: bool([0, 0, 0, 0]),
      generated_mask: bool([0, 0, 1, 1]), turn_ids: i32([0, 0, 1, 1]), turn_roles: ["user", "assistant"],
      scores: f32([1, 2, NaN, NaN, 1, 2, 3, NaN], [2, 4]), step_tokens: [2, 3], step_probs: [0.5, null],
      method: "saliency", score_meaning: "", signed: true, shared_scale: false, view: "text", selected_step: 0,
      foil_tokens: ["f1", "f2"], foil_probs: [0.1, null], contrast: " f1f2", word_ids: i32([0, 1, 2, 3]),
      sentence_ids: i32([0, 0, 1, 1]), source_mask: bool([1, 1, 0, 0]), granularity: "token" },
  },
  {
    file: "comparison.js", model: "ComparisonModel", widget: comparison,
    state: { ...common, tokens: ["a", "b"], spaces_before: ["", " "], special_mask: bool([0, 0]), word_ids: i32([0, 1]), sentence_ids: i32([0, 0]),
      turn_ids: i32([0, 1]), turn_roles: ["user", "assistant"], scores: f32([1, 2, -1, 0], [2, 2]), methods: ["m1", "m2"], signed: [true, false], target_label: "pos", granularity: "token",
      agreements: { token: [{ a: "m1", b: "m2", spearman: 0.5, top_k_overlap: 1, k: 1 }] }, agreement_by: "magnitude", shared_scale: false },
  },
  {
    file: "example_list.js", model: "ExampleListModel", widget: examples,
    state: { error: "", tokens: [["a", "b"], ["c"]], spaces_before: [["", " "], [""]], special_mask: bool([0, 0, 0]), word_ids: i32([0, 1, 0]),
      sentence_ids: i32([0, 0, 0]), turn_ids: i32([0, 1, 0]), turn_roles: [["user", "assistant"], []], scores: f32([1, -1, 2]), predicted: ["x", "y"], confidence: [0.9, null], true_labels: ["x", ""],
      max_attribution: [1, 2], signed: true, method: "saliency", sort_by: "index", descending: false, filter_label: "", filter_outcome: "all",
      granularity: "token", shared_scale: true, page: 0, page_size: 10, selected_example: -1, total_examples: 0, first_example: 0 },
  },
  {
    file: "concept_browser.js", model: "ConceptBrowserModel", widget: conceptBrowser,
    state: { error: "", method: "NMF", layer: "l1", n_rows: 3, labels: ["a", "b"], top_tokens: [["x"], []], density: f32([0.5, 0]),
      max_activation: f32([1, 0]), importance: f32([0.5, NaN]), importance_label: "imp", label_detection: f32([0.75, NaN]),
      label_fuzzing: f32([0.5, NaN]), label_scorer: "judge", label_detection_chance: payload(Int8Array.from([1, -1]), "int8", [2]),
      label_fuzzing_chance: payload(Int8Array.from([0, -1]), "int8", [2]), label_control_n: 2, label_control_wins: 2, label_control_ties: 0,
      label_control_threshold: 0.7, label_discriminates: true, sort_by: "index", descending: false, search: "",
      hide_dead: false, min_label_score: 0, page: 0, page_size: 10, selected_concept: 0, requested: [0, 1], text_tokens: [["t", "u"]], text_gaps: [["", " "]],
      text_top_concepts: i32([0, -1, 1, 0], [2, 2]), text_top_values: f32([1, 0, 2, 1], [2, 2]), selected_text: 0, selected_token: 0,
      text_mode: "attribution", attribution_method: "occlusion",
      details: { 0: { concept: 0, label: "a", density: 0.5, mean: 0.1, max: 1, min: 0, hist_edges: f32([0, 0.5, 1]), hist_counts: i32([1, 2]),
        examples: [{ tokens: ["t", "u"], center: 1, activation: 1, text_id: 0, activations: [0, 1] }], top_texts: [{ text_id: 0, max_activation: 1, text: "t u" }],
        vocabulary: [{ token: "v", logit: 1 }], text_activations: f32([0, 1]),
        text_attribution: { values: f32([-0.5, 1]), method: "occlusion", signed: true, score: "activation of concept 0", activation: 1, completeness_error: null },
        label_scores: { scorer: "judge", detection: { balanced_accuracy: 0.75, auc: 0.8, p_value: 0.04, n_examples: 4, n_activating: 2, n_non_activating: 2, n_failed: 0 },
          fuzzing: { balanced_accuracy: 0.5, auc: null, p_value: 0.6, n_examples: 4, n_activating: 2, n_non_activating: 2, n_failed: 0 },
          control: { swapped_from: 1, swapped_label: "b", detection: { balanced_accuracy: 0.5, p_value: 0.6 }, fuzzing: { balanced_accuracy: 0.25, p_value: null },
            true_score: 0.625, swapped_score: 0.375, outscores: true } } } } },
  },
  {
    file: "monitor.js", model: "MonitorModel", widget: monitor,
    state: { error: "", stream_id: "contract-test", checkpoint: null, checkpoint_schema: {}, layers: ["L0"], x_label: "step", title: "run",
      panels: [{ id: "loss", title: "Loss", kind: "lines", series: ["loss"] }, { id: "heat", title: "Heat", kind: "heatmap", metric: "ratio" }] },
  },
  {
    file: "attention.js", model: "AttentionModel", widget: attention,
    state: { error: "", tokens: ["a", "b"], key_tokens: ["a", "b"], generated_mask: bool([0, 1]), n_layers: 1, n_heads: 2, n_kv_heads: 1,
      layer_names: ["l0"], kind: "self", model_name: "m", thumbnails: payload(Int8Array.from([127, 0, 64, 64, 127, 0, 0, 127]), "int8", [1, 2, 2, 2]),
      pinned: [{ layer: 0, head: 0 }], pinned_keys: payload(Int8Array.from([0, 1, 1, 0]), "int8", [1, 2, 2]),
      pinned_weights: f32([1, 0, 0.6, 0.4], [1, 2, 2]), pinned_top_k: 2, view: "head", layer: 0, heads: [0], aggregate: "", pattern_style: "heatmap",
      focus: -1, locked: false },
  },
  {
    file: "lens.js", model: "LensModel", widget: lens,
    state: { error: "", tokens: ["a", "b"], layers: ["layer:0", "layer:1"], lenses: ["logit", "tuned"], vocab: ["x", "y"],
      top_vocab: i32([0, 1, 1, 0, 0, 1, 1, 0], [2, 2, 2, 1]), top_probs: f32([0.5, 0.2, 0.3, 0.9, 0.5, 0.2, 0.3, 0.9], [2, 2, 2, 1]),
      kl: f32([1, 2, 0, 0, 1, 2, 0, 0], [2, 2, 2]), target_labels: ["next token"], target_vocab: i32([1, -1], [2, 1]),
      target_probs: f32([0.2, NaN, 0.3, NaN, 0.2, NaN, 0.3, NaN], [2, 2, 2, 1]), target_ranks: i32([2, 0, 1, 0, 2, 0, 1, 0], [2, 2, 2, 1]),
      generated_mask: bool([0, 1]), vocab_size: 10, model_name: "m", lens: "logit", colour_by: "top1_prob", target: 0,
      selected_position: -1, plotted_targets: [0] },
  },
  { file: "patching.js", model: "PatchingViewModel", widget: patching, state: patchingState() },
  {
    file: "steering.js", model: "SteeringViewModel", widget: steering,
    state: { error: "", prompt: "The <b>room</b>", layer: "layer:1", scale_meaning: "scale × mean residual norm",
      prompt_tokens: ["The", " <b>room</b>"], unsteered_tokens: [" was", " quiet"],
      steered_tokens: [[" was", " quiet"], [" was", "<img src=x onerror=alert(1)>"]], changed: [[false, false], [false, true]],
      scales: f32([0, 2]), metric_mean: f32([0.5, 3]), metric_spread: f32([0.7, 1.4]), damage: f32([0, 0.7]),
      metric_name: "logit difference", damage_tokens: 4096, positions: "generated", hidden_scales: [] },
  },
  {
    file: "circuit.js", model: "CircuitViewModel", widget: circuit,
    state: { error: "", tokens: ["a", "b"], spaces_before: ["", ""], special_mask: bool([0, 0]), word_ids: i32([0, 1]), sentence_ids: i32([0, 0]),
      turn_ids: null, turn_roles: [], node_kind: i32([0, 1, 2, 2, 3]), node_layer: i32([0, 0, -1, -1, 2]), node_pos: i32([1, 0, 0, 1, 1]),
      node_index: i32([7, -1, 10, 11, 12]), node_influence: f32([0.7, 0, 0.7, 0.2, 0.9]), node_activation: f32([2, NaN, NaN, NaN, NaN]),
      node_labels: ["<img src=x onerror=alert(1)>", "", "", "", ""], node_ids: [], edge_src: i32([2, 0, 3]), edge_dst: i32([0, 4, 4]),
      edge_weights: new DataView(Uint16Array.from([0x4000, 0x3e00, 0xb800]).buffer), n_layers: 1, logit_tokens: ['say "c"'], logit_probs: [0.9],
      details: { "0_7_1": { label: "a-ness", source: "this prompt", contexts: [{ tokens: ["a", "b"], acts: [0, 2] }], top_logits: ["x"], bottom_logits: [] } },
      graph_info: { scan: "toy", pruned: false, node_threshold: null, edge_threshold: null, replacement: 1, completeness: 1, scores_of: "the unpruned graph in Python", kernel: "details" },
      scores_note: "", pinned: ["0_7_1"], groups: [{ name: "g", members: ["0_7_1"] }], node_threshold: 1, edge_threshold: 1, selected: "0_7_1" },
  },
]; // prettier-ignore
