import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    environment: "jsdom",
    include: ["tests/**/*.test.js"],
    // correctness tests, not timing ones (those live in benchmarks/): a loaded 2-core machine must not fail them
    testTimeout: 30000,
  },
});
