import { invoke } from "@tauri-apps/api/core";
import { listen } from "@tauri-apps/api/event";
import { App } from "./app";
import { HttpTransport, TauriTransport, type Transport } from "./transport";

function transport(): Transport {
  if ("__TAURI_INTERNALS__" in window) return new TauriTransport(invoke, listen, () => localStorage.getItem("operator") ?? "");
  // In a browser, served by the admin listener of `idemgate serve` (server.console_dir): the admin
  // API on the same origin. The token comes from the URL fragment (#token=..., never sent to the
  // server) or is asked for once, and kept for this tab only.
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) history.replaceState(null, "", location.pathname + location.search);
  const token = fromHash ?? sessionStorage.getItem("token") ?? window.prompt("idemgate admin token") ?? "";
  sessionStorage.setItem("token", token);
  return new HttpTransport(location.origin, token);
}

const root = document.getElementById("app");
if (root) void new App(root, transport(), localStorage).start();
