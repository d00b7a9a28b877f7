/**
 * Concept browser (front end of interp_widgets.widgets.ConceptBrowser): a sortable, searchable, paged list
 * of concepts and a detail pane for the selected one (activation histogram, top contexts with the
 * activating token highlighted, top texts, promoted vocabulary, per-token activations of an input text).
 *
 * Synced traits: the ConceptBrowserModel typedef below; the fields marked "written" are also set by the view. The
 * view writes `requested` (the concept ids on the page) and the kernel answers with their `details`.
 *
 * @example
 *   import widget from "./concept_browser.js";
 *   widget.render({model, el});
 */

import "./concept_browser.css";
import { mountView } from "./lib/view.js";
import { build } from "./views/concept_browser/build.js";
import { BUSY_AFTER, draw, histogramSvg } from "./views/concept_browser/draw.js";
import { read, searchText, textPreview, visibleConcepts } from "./views/concept_browser/read.js";

export { BUSY_AFTER, histogramSvg, searchText, textPreview, visibleConcepts };

/** @typedef {import("./lib/codec.js").BinaryArray} BinaryArray */
/**
 * @template {object} T
 * @typedef {import("./lib/model.js").AnyModel<T>} AnyModel
 */

/**
 * What the kernel sends for one requested concept (Python `ConceptBrowser.concept_detail`).
 * @typedef {object} ConceptDetail
 * @property {number} concept
 * @property {string} label
 * @property {string} label_source  Who made the label ("top tokens", an LM labeller's name ...).
 * @property {number | null} density
 * @property {number | null} mean
 * @property {number | null} max
 * @property {number | null} min
 * @property {BinaryArray} hist_edges  bins + 1 edges.
 * @property {BinaryArray} hist_counts
 * @property {{tokens: string[], center: number, activation: number | null, text_id: number, activations: number[]}[]} examples
 *   Top activating contexts, the activating token at `center`.
 * @property {{text_id: number, max_activation: number | null, text: string}[]} top_texts
 * @property {{token: string, logit: number | null}[] | null} vocabulary  Promoted tokens, null without an unembedding.
 * @property {BinaryArray | null} text_activations  Activation on each token of the selected input text.
 * @property {ConceptTextAttribution | null} [text_attribution]  In the "attribution" text mode: which tokens of the
 *   selected text make the concept fire (null until the kernel has computed it).
 * @property {LabelScores | null} [label_scores]  The scores of the label shown, null when it is not scored.
 */

/**
 * Detection and fuzzing scores of one label (Python `ConceptBrowser._label_score_detail`, from score_labels).
 * @typedef {object} LabelScores
 * @property {string} scorer  The scorer that judged the label.
 * @property {LabelScore} detection
 * @property {LabelScore} fuzzing
 * @property {LabelControl | null} [control]  The label's swapped-label control, null when none judged it.
 */
/**
 * One concept's swapped-label control (Python `ConceptBrowser._label_control_detail`): its examples judged again
 * under another concept's label.
 * @typedef {object} LabelControl
 * @property {number} swapped_from  The concept whose label was swapped in.
 * @property {string} swapped_label  That label.
 * @property {{balanced_accuracy: number | null, p_value: number | null}} detection  Scores under the swapped label.
 * @property {{balanced_accuracy: number | null, p_value: number | null}} fuzzing
 * @property {number | null} true_score  Mean of the two balanced accuracies under the true label.
 * @property {number | null} swapped_score  The same under the swapped label.
 * @property {boolean} outscores  The true label scored strictly higher.
 */
/**
 * @typedef {object} LabelScore
 * @property {number | null} balanced_accuracy  Chance is 0.5.
 * @property {number | null} auc  ROC AUC of the scorer's P("1"), null without it.
 * @property {number | null} [p_value]  One-sided Fisher exact p-value of balanced accuracy > 0.5, null when untested.
 * @property {number} n_examples
 * @property {number} n_activating
 * @property {number} n_non_activating
 * @property {number} n_failed  Answers that could not be read.
 */

/**
 * Attribution of a concept's activation to the shown tokens of the selected text (Python
 * `ConceptBrowser._text_attribution`).
 * @typedef {object} ConceptTextAttribution
 * @property {BinaryArray} values  float32, one score per shown token.
 * @property {string} method  Attribution method.
 * @property {boolean} signed
 * @property {string} score  What was attributed ("activation of concept 3 summed over the non-special tokens").
 * @property {number | null} activation  Its value on the text.
 * @property {number | null} completeness_error  Σ scores − (score(x) − score(baseline)), path methods only.
 */

/**
 * Synced traits of ConceptBrowser: its data (ConceptBrowserData, generated in lib/view_traits.js) and its view
 * state (ConceptBrowserState).
 * @typedef {import("./lib/view_traits.js").ConceptBrowserData & ConceptBrowserState} ConceptBrowserModel
 */
/**
 * View state of ConceptBrowser (and its bases PagedList, InterpWidget).
 * @typedef {object} ConceptBrowserState
 * @property {"index" | "label" | "density" | "max" | "importance" | "abs_importance" | "detection" | "fuzzing"} sort_by  (written)
 * @property {number} min_label_score  Keep concepts whose label scores both reach this, 0: no filter (written).
 * @property {boolean} descending  (written)
 * @property {string} search  Keep concepts whose label or top tokens contain this (written).
 * @property {boolean} hide_dead  Hide concepts that are never active (written).
 * @property {number} page  Page shown, 0-based (written).
 * @property {number} page_size  Concepts per page.
 * @property {number} selected_concept  Concept in the detail pane, -1: none (written).
 * @property {number[]} requested  Concept ids on the page (written; read to skip repeated requests).
 * @property {Object<string, ConceptDetail>} details  Detail of each requested concept, by str(concept).
 * @property {number} selected_text  Input text shown in the text view (written).
 * @property {number} selected_token  Token of that text whose active concepts are listed, -1: none (written).
 * @property {"activation" | "attribution"} text_mode  What colours the text view (written).
 * @property {string} attribution_method  Method of the input attributions, empty when none are available.
 * @property {string} error  When non-empty, shown instead of the view (read by guardedRender).
 */

import { CONCEPT_BROWSER_DATA_TRAITS as DATA_TRAITS } from "./lib/view_traits.js";
/** Traits whose change only redraws. @type {(keyof ConceptBrowserModel)[]} */
const VIEW_TRAITS = [
  "sort_by",
  "descending",
  "search",
  "hide_dead",
  "min_label_score",
  "page",
  "page_size",
  "selected_concept",
  "details",
  "selected_text",
  "selected_token",
  "text_mode",
  "attribution_method",
];

export default mountView("ConceptBrowser", { dataTraits: DATA_TRAITS, uiTraits: VIEW_TRAITS, read, build, draw });
