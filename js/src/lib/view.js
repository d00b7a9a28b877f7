/**
 * Plumbing every view's render shares: event handlers whose exceptions are shown in the cell, trait writes
 * sent to Python in one message, and redraws coalesced so a burst of trait changes redraws once.
 *
 * @example
 *   const { safely, save, coalesce } = viewKit(model, reportError);
 *   button.addEventListener("click", safely(() => save({ page: 0 })));
 *   const request = coalesce(draw); // request() any number of times: draw() runs once, in a microtask
 */

/**
 * @param {{set: Function, save_changes: Function}} model
 * @param {(error: unknown) => void} reportError
 */
export function viewKit(model, reportError) {
  /** `fn` wrapped so that an exception is reported (shown in place of the view) instead of lost. */
  const safely =
    (fn) =>
    (...args) => {
      try {
        return fn(...args);
      } catch (error) {
        reportError(error);
        return undefined;
      }
    };
  /** Set traits and send them to Python in one message. */
  const save = (changes) => {
    for (const [name, value] of Object.entries(changes)) model.set(name, value);
    model.save_changes();
  };
  /** A `request(level)` that runs `fn(maxLevel)` once, in a microtask, for any number of calls before it. */
  const coalesce = (fn) => {
    let pending = 0;
    return (level = 1) => {
      if (pending === 0) {
        queueMicrotask(
          safely(() => {
            const requested = pending;
            pending = 0;
            fn(requested);
          }),
        );
      }
      pending = Math.max(pending, level);
    };
  };
  return { safely, save, coalesce };
}
