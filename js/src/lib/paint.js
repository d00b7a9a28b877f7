/**
 * Shared token painting and block-by-block rendering for every view that draws token runs.
 *
 * `paintToken` encodes a score on an element either by colour (diverging or sequential background,
 * contrasting text) or, for the non-colour encoding, by underline weight plus a +/− marker.
 * `renderTokenRun` builds long inputs block by block (the first at once, the rest in idle time, a couple of
 * blocks per frame), so 10k-token inputs paint quickly and every frame stays short.
 *
 * @example
 *   paintToken(span, 0.4, 0.8, {theme: "light", signed: true, encoding: "colour"});
 *   const run = renderTokenRun(box, {count, build}); // run.cancel() before the next render
 */
import { scoreColours } from "./colour.js";

const MINUS = "\u2212";

/**
 * @param {HTMLElement} el
 * @param {number} score  NaN paints the neutral "unseen" look
 * @param {number} max
 * @param {{theme?: "light" | "dark", signed?: boolean, encoding?: "colour" | "underline", boost?: boolean}} options
 */
export function paintToken(
  el,
  score,
  max,
  { theme = "light", signed = true, encoding = "colour", boost = false } = {},
) {
  const unseen = Number.isNaN(score);
  const value = unseen ? 0 : score;
  if (encoding === "underline") {
    const t = max > 0 ? Math.min(Math.abs(signed ? value : Math.max(value, 0)) / max, 1) : 0;
    el.style.backgroundColor = "";
    el.style.color = "";
    el.style.borderBottom = t > 0 ? `${(1 + 5 * t).toFixed(1)}px solid currentColor` : "1px dotted currentColor";
    if (signed && value !== 0 && !unseen) el.dataset.iwSign = value > 0 ? "+" : MINUS;
    else delete el.dataset.iwSign;
    return;
  }
  const colours = scoreColours(value, max, theme, { signed, boost });
  el.style.borderBottom = "";
  delete el.dataset.iwSign;
  el.style.backgroundColor = colours.background;
  el.style.color = colours.color;
}

/** Inputs up to this many units are drawn as one run of inline text, exactly like the source text. */
export const SINGLE_RUN = 500;
/** Target units per block for longer inputs. */
export const BLOCK = 300;
/** Height (px) per unit a block is assumed to take before it is built (refined after the first block). */
const UNIT_HEIGHT = 2.4;
/** Blocks built per idle callback (each is laid out in the next frame). */
const BLOCKS_PER_IDLE = 2;

/**
 * Split units 0..count-1 into blocks for {@link renderTokenRun}: a list of [start, end). A block ends before
 * the first hard break (`breakRank(u) === 2`, e.g. a newline precedes unit u) between `size` and `2 * size`
 * units, else before the first soft break (`1`, e.g. a new sentence), else after `size` units; a short tail
 * joins the previous block.
 * @param {number} count
 * @param {{size?: number, breakRank?: (u: number) => number}} [options]
 * @returns {Array<[number, number]>}
 * @example blockBounds(10, {size: 4}) // [[0, 4], [4, 10]]
 */
export function blockBounds(count, { size = BLOCK, breakRank = () => 0 } = {}) {
  const bounds = [];
  let start = 0;
  while (start < count) {
    let end = count;
    if (count - start > 1.5 * size) {
      let soft = -1;
      end = -1;
      for (let u = start + size; u < Math.min(start + 2 * size, count) && end < 0; u += 1) {
        const rank = breakRank(u);
        if (rank >= 2) end = u;
        else if (rank === 1 && soft < 0) soft = u;
      }
      if (end < 0) end = soft >= 0 ? soft : start + size;
    }
    bounds.push([start, end]);
    start = end;
  }
  return bounds;
}

/**
 * Run `step(budget)` in idle time (requestIdleCallback, else timers) until it returns false. `budget()` is
 * the milliseconds left in the current idle period.
 * @returns {{cancel: () => void}}
 */
export function idleLoop(win, step) {
  const idle = win?.requestIdleCallback
    ? (fn) => win.requestIdleCallback(fn, { timeout: 200 })
    : (fn) => setTimeout(() => fn(null), 0);
  const unidle = win?.cancelIdleCallback ? (id) => win.cancelIdleCallback(id) : clearTimeout;
  let handle = null;
  const run = (deadline) => {
    const end = performance.now() + 8;
    const budget = deadline && !deadline.didTimeout ? () => deadline.timeRemaining() : () => end - performance.now();
    handle = step(budget) ? idle(run) : null;
  };
  handle = idle(run);
  return {
    cancel() {
      if (handle !== null) unidle(handle);
      handle = null;
    },
  };
}

/**
 * Draw `count` token units into `box`, keeping first paint and every later frame short for long inputs.
 * Up to `single` units are built at once as one inline run. Longer inputs are split into blocks
 * ({@link blockBounds}); each block is a block-level `.iw-token-block`, so adding one lays out only that
 * block (appending to one long inline run would lay the whole run out again each time). Blocks not built yet
 * hold their estimated height, so the scroll range is right from the start. The first block is built at once,
 * the others in idle time, in order, or at once when a unit is asked for with `ensure(u)` (keyboard focus).
 * `build(u, parent, atBlockStart)` appends unit u's nodes to `parent` and returns its element.
 * @param {HTMLElement} box
 * @param {{count: number, build: (u: number, parent: Node, atBlockStart: boolean) => HTMLElement,
 *          breakRank?: (u: number) => number, size?: number, single?: number, onDone?: () => void}} options
 * `repaint(paint)` restyles the built units with `paint(element, u)`: at once the blocks in (or near) view, the other
 * built blocks in idle time or as soon as they scroll into view (an IntersectionObserver), so a hover that recolours
 * a long run costs the blocks on screen, not every built unit. Without IntersectionObserver every built unit is
 * repainted at once.
 * @returns {{span: (u: number) => HTMLElement | undefined, ensure: (u: number) => HTMLElement,
 *            built: () => HTMLElement[], repaint: (paint: (el: HTMLElement, u: number) => void) => void,
 *            finish: () => void, cancel: () => void}}
 *   `span(u)` is undefined until u's block is built; `built()` lists the units' elements built so far
 * @example
 *   const run = renderTokenRun(box, {count: units.length, build: (u, parent) => parent.appendChild(span(u))});
 *   run.ensure(9999).focus();
 */
export function renderTokenRun(box, { count, build, breakRank, size = BLOCK, single = SINGLE_RUN, onDone }) {
  const doc = box.ownerDocument;
  const win = doc.defaultView;
  const spans = new Array(count);
  const bounds = count <= single ? [[0, count]] : blockBounds(count, { size, breakRank });
  const blocks = count <= single ? [box] : bounds.map(() => doc.createElement("div"));
  const done = new Uint8Array(bounds.length);
  let left = bounds.length;
  let loop = null;
  let perUnit = UNIT_HEIGHT;
  const estimate = (b) => {
    blocks[b].style.minHeight = done[b] ? "" : `${Math.ceil((bounds[b][1] - bounds[b][0]) * perUnit)}px`;
  };

  // repaint bookkeeping: the paint version each block shows, and which blocks are in (or near) view
  let painter = null;
  let version = 0;
  const paintedAt = new Int32Array(bounds.length);
  const inView = new Set();
  let observed = false; // the observer has reported at least once
  let staleLoop = null;
  const refresh = (b) => {
    if (!done[b] || painter === null || paintedAt[b] === version) return;
    for (let u = bounds[b][0]; u < bounds[b][1]; u += 1) painter(spans[u], u);
    paintedAt[b] = version;
  };
  const observer = blocks[0] !== box && win?.IntersectionObserver
    ? new win.IntersectionObserver((entries) => {
        observed = true;
        for (const entry of entries) {
          const b = Number(entry.target.dataset.iwBlock);
          if (entry.isIntersecting) {
            inView.add(b);
            refresh(b);
          } else inView.delete(b);
        }
      }, { rootMargin: "50px 0px" })
    : null; // prettier-ignore

  const fill = (b) => {
    if (done[b]) return;
    const [start, end] = bounds[b];
    const fragment = doc.createDocumentFragment();
    for (let u = start; u < end; u += 1) spans[u] = build(u, fragment, u === start);
    blocks[b].append(fragment);
    done[b] = 1;
    paintedAt[b] = version; // build() paints with the current state
    if (blocks[b] !== box) estimate(b);
    left -= 1;
    if (left === 0) {
      loop?.cancel();
      onDone?.();
    }
  };
  const blockOf = (u) => {
    let [lo, hi] = [0, bounds.length - 1];
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (bounds[mid][0] <= u) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };

  box.replaceChildren();
  if (blocks[0] !== box) {
    blocks.forEach((block, b) => {
      block.className = "iw-token-block";
      block.dataset.iwBlock = String(b);
      estimate(b);
      observer?.observe(block);
    });
    box.append(...blocks);
  }
  fill(0);
  if (blocks[0] !== box) {
    // Once the first block is laid out, size the placeholders from its height per unit.
    win?.requestAnimationFrame?.(() => {
      const measured = blocks[0].offsetHeight / (bounds[0][1] - bounds[0][0]);
      if (!(measured > 0)) return;
      perUnit = measured;
      for (let b = 1; b < blocks.length; b += 1) estimate(b);
    });
  }
  if (left > 0) {
    let next = 1;
    loop = idleLoop(win, (budget) => {
      for (let k = 0; k < BLOCKS_PER_IDLE && left > 0 && (k === 0 || budget() > 4); k += 1) {
        while (done[next]) next += 1;
        fill(next);
      }
      return left > 0;
    });
  }
  return {
    span: (u) => spans[u],
    ensure(u) {
      if (!spans[u]) fill(blockOf(u));
      return spans[u];
    },
    built: () => spans.filter(Boolean),
    repaint(paint) {
      painter = paint;
      version += 1;
      staleLoop?.cancel();
      staleLoop = null;
      if (observer === null || !observed) {
        for (let b = 0; b < bounds.length; b += 1) refresh(b);
        return;
      }
      for (const b of inView) refresh(b);
      let next = 0;
      staleLoop = idleLoop(win, (budget) => {
        for (; next < bounds.length && budget() > 2; next += 1) refresh(next);
        return next < bounds.length;
      });
    },
    finish() {
      for (let b = 0; b < bounds.length; b += 1) {
        fill(b);
        refresh(b);
      }
    },
    cancel() {
      loop?.cancel();
      loop = null;
      staleLoop?.cancel();
      staleLoop = null;
      observer?.disconnect();
    },
  };
}
