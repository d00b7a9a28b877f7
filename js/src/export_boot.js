/**
 * Entry inlined as the module script of exported pages: renders every embedded widget on load.
 * The logic lives in lib/export_page.js so tests can drive it without side effects.
 */
import { mountAll } from "./lib/export_page.js";

mountAll(document);
