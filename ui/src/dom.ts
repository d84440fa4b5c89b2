// A tiny DOM builder. Text always goes through textContent: ledger data (keys, bodies, reasons)
// comes from agents and operators and is never parsed as HTML.
type Child = Node | string | number | null | undefined | false;
export interface Props {
  class?: string;
  testid?: string;
  title?: string;
  on?: Partial<{ [K in keyof HTMLElementEventMap]: (e: HTMLElementEventMap[K]) => void }>;
  attrs?: Record<string, string | number | boolean | null | undefined>;
}

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, props: Props | null, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (props?.class) el.className = props.class;
  if (props?.testid) el.dataset.testid = props.testid;
  if (props?.title) el.title = props.title;
  for (const [k, v] of Object.entries(props?.attrs ?? {})) {
    if (v === null || v === undefined || v === false) continue;
    el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const [k, f] of Object.entries(props?.on ?? {})) el.addEventListener(k, f as EventListener);
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function clear(el: Element): void {
  while (el.firstChild) el.removeChild(el.firstChild);
}

/** An SVG element (namespace-correct). */
export function svg(tag: string, attrs: Record<string, string | number>, ...children: Node[]): SVGElement {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  el.append(...children);
  return el;
}
