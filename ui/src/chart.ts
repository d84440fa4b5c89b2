// The Overview's charts: events an hour over the last hours, with the scale on the left, the time
// along the bottom and each hour's count on hover (a readout under the plot, and the hour's own
// tooltip). Text stays HTML beside the SVG, which is stretched to its box and would distort it.
import { h, svg } from "./dom";
import { sparkPoints } from "./format";

const HOUR = 3_600_000;
const W = 300;
const H = 60;

/** "14:00" for an hour's start, with the day when it is not today's. */
function hourLabel(t: number, now: number): string {
  const d = new Date(t);
  const hm = `${String(d.getHours()).padStart(2, "0")}:00`;
  return new Date(now).toDateString() === d.toDateString() ? hm : `${d.toLocaleDateString(undefined, { day: "numeric", month: "short" })} ${hm}`;
}

/**
 * A chart of `values`, one an hour, the last the hour that holds `now`; `what` names a count
 * ("executions"). Hovering an hour shows its span and count.
 */
export function hourlyChart(testid: string, label: string, what: string, values: number[], now: number): HTMLElement {
  const hours = values.length;
  const max = Math.max(1, ...values);
  const total = values.reduce((a, b) => a + b, 0);
  const first = now - (now % HOUR) - (hours - 1) * HOUR;
  const idle = `${total} in ${hours}h · hover for an hour's count`;
  const readout = h("div", { class: "readout hint", testid: `${testid}-readout` }, idle);
  const step = W / hours;
  const columns = values.map((v, i) => {
    const from = first + i * HOUR;
    const says = `${hourLabel(from, now)}–${hourLabel(from + HOUR, now).slice(-5)}: ${v} ${what}`;
    const col = svg("rect", { x: (i * step).toFixed(2), y: 0, width: step.toFixed(2), height: H, class: "hour", "data-hour": i }, svg("title", {}));
    col.firstChild!.textContent = says;
    col.addEventListener("mouseenter", () => {
      readout.textContent = says;
      col.classList.add("on");
    });
    col.addEventListener("mouseleave", () => {
      readout.textContent = idle;
      col.classList.remove("on");
    });
    return col;
  });
  // The span's first hour, then a tick a day apart back from now, and now. Placed through the
  // CSSOM: the console's content security policy refuses style attributes.
  const at = (el: HTMLElement, side: "left" | "right", pct: number) => {
    el.style[side] = `${pct}%`;
    return el;
  };
  const xAxis = h(
    "div",
    { class: "x-axis", testid: `${testid}-x` },
    at(h("span", null, hourLabel(first, now)), "left", 0),
    ...[48, 24].filter((ago) => ago <= hours - 12).map((ago) => at(h("span", { class: "mid" }, `−${ago}h`), "left", ((hours - ago) / hours) * 100)),
    at(h("span", null, "now"), "right", 0),
  );
  return h(
    "figure",
    { class: "chart", testid },
    h("figcaption", null, `${label} · ${total} in ${hours}h`),
    h(
      "div",
      { class: "plot" },
      h("div", { class: "y-axis", testid: `${testid}-y` }, h("span", null, String(max)), h("span", null, "0")),
      svg(
        "svg",
        { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": `${label}, ${what} an hour, at most ${max}` },
        svg("line", { x1: 0, y1: 1, x2: W, y2: 1, class: "grid" }),
        svg("line", { x1: 0, y1: H - 1, x2: W, y2: H - 1, class: "grid" }),
        svg("polyline", { points: sparkPoints(values, W, H), fill: "none", class: "line" }),
        ...columns,
      ),
    ),
    xAxis,
    readout,
  );
}
