import { defineConfig } from "vite";

export default defineConfig({
  base: "./",
  clearScreen: false,
  build: { outDir: "dist", target: "es2021", emptyOutDir: true, sourcemap: false },
  test: { environment: "happy-dom", globals: true },
});
