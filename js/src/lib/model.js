/**
 * Types of the Python↔JS contract, for JSDoc only (this module has no runtime code and no view imports it).
 *
 * Each view declares the synced traits of its Python class as a `@typedef {object} <Stem>Model` at the top of
 * `js/src/<bundle>.js` (`TokenHighlightWidget` → `TokenHighlightModel`, `ConceptBrowser` → `ConceptBrowserModel`):
 * the view's data typedef `<Stem>Data`, generated from the Python view-data class in `lib/view_traits.js`, and its
 * own `@typedef {object} <Stem>State` of the view-state traits, one `@property` per trait
 * (`@typedef {import("./lib/view_traits.js").<Stem>Data & <Stem>State} <Stem>Model`). It types its render with
 * `AnyModel<<Stem>Model>`, as anywidget's own types (`AnyModel<T>`, `RenderProps<T>`) do in TypeScript.
 * `tests/widgets/test_widget_contract.py` checks that the typedef, the traits the view's code reads and writes, and the
 * Python class's `sync=True` traits are the same names.
 *
 * @example
 *   // js/src/my_view.js, over a Python class with one synced trait `title = traitlets.Unicode().tag(sync=True)`:
 *   //   @typedef {object} MyViewModel
 *   //   @property {string} title
 *   //   @param {AnyModel<MyViewModel>} model
 *   function read(model) { return { title: model.get("title") }; }
 */

/**
 * The part of anywidget's model that the views use, over traits `T` (see anywidget's `AnyModel<T>`).
 * Events are `change:<trait>` and `msg:custom` (custom messages, `(content, buffers) => void`).
 * @template {object} T
 * @typedef {object} AnyModel
 * @property {<K extends keyof T & string>(name: K) => T[K]} get  Current value of a synced trait.
 * @property {<K extends keyof T & string>(name: K, value: T[K]) => void} set  Set a trait (sent by save_changes).
 * @property {(event: `change:${keyof T & string}` | "msg:custom", callback: Function) => void} on
 * @property {(event: `change:${keyof T & string}` | "msg:custom", callback: Function) => void} off
 * @property {() => void} save_changes  Send the traits set since the last call to Python, in one message.
 * @property {(content: unknown, callbacks?: unknown, buffers?: ArrayBuffer[]) => void} send  A custom message.
 */

export {};
