import { invoke } from "@tauri-apps/api/core";
import { listen } from "@tauri-apps/api/event";
import { App } from "./app";
import { HttpTransport, TauriTransport, type Transport } from "./transport";

function transport(): Transport {
  if ("__TAURI_INTERNALS__" in window) return new TauriTransport(invoke, listen);
  // In a browser: the admin API of `idemgate serve` (?api=http://127.0.0.1:8701&token=...).
  const q = new URLSearchParams(location.search);
  return new HttpTransport(q.get("api") ?? location.origin, q.get("token") ?? sessionStorage.getItem("token") ?? "");
}

const root = document.getElementById("app");
if (root) void new App(root, transport(), localStorage).start();
