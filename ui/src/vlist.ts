// A virtualised list with fixed-height rows and keyset paging: only the visible rows exist in the
// DOM, and the next page is fetched when the view nears the end — smooth on a million events.
import { h, clear } from "./dom";

export class VirtualList<T> {
  readonly el: HTMLDivElement;
  private readonly spacer: HTMLDivElement;
  private readonly win: HTMLDivElement;
  items: T[] = [];
  private done = false;
  private loading = false;
  selected = -1;

  constructor(
    private readonly rowHeight: number,
    private readonly renderRow: (item: T, index: number, selected: boolean) => HTMLElement,
    /** The page after `last`; `more: false` when the keyset cursor says it was the last one. */
    private readonly loadMore: (last: T | undefined) => Promise<{ items: T[]; more: boolean }>,
    testid = "vlist",
  ) {
    this.spacer = h("div", { class: "vspacer" });
    this.win = h("div", { class: "vwindow" });
    this.el = h("div", { class: "vlist", testid, attrs: { tabindex: 0 } }, this.spacer, this.win);
    this.el.addEventListener("scroll", () => {
      this.paint();
      void this.maybeLoad();
    });
  }

  /** Clears and loads the first page. */
  async reset(): Promise<void> {
    this.items = [];
    this.done = false;
    this.selected = -1;
    this.el.scrollTop = 0;
    this.paint();
    await this.maybeLoad(true);
  }

  /** Puts newer items on top (live tail), keeping what the operator is looking at in place. */
  prepend(newer: T[]): void {
    if (!newer.length) return;
    const atTop = this.el.scrollTop < this.rowHeight;
    this.items = [...newer, ...this.items];
    if (this.selected >= 0) this.selected += newer.length;
    if (!atTop) this.el.scrollTop += newer.length * this.rowHeight;
    this.paint();
  }

  private async maybeLoad(force = false): Promise<void> {
    if (this.loading || this.done) return;
    const lastVisible = Math.ceil((this.el.scrollTop + (this.el.clientHeight || 600)) / this.rowHeight);
    if (!force && lastVisible < this.items.length - 40) return;
    this.loading = true;
    try {
      const page = await this.loadMore(this.items[this.items.length - 1]);
      this.items.push(...page.items);
      if (!page.more || page.items.length === 0) this.done = true;
    } finally {
      this.loading = false;
    }
    this.paint();
    if (!this.done && this.items.length * this.rowHeight < (this.el.clientHeight || 600)) await this.maybeLoad(true);
  }

  paint(): void {
    this.spacer.style.height = `${this.items.length * this.rowHeight}px`;
    const first = Math.max(0, Math.floor(this.el.scrollTop / this.rowHeight) - 10);
    const count = Math.ceil((this.el.clientHeight || 600) / this.rowHeight) + 20;
    clear(this.win);
    this.win.style.transform = `translateY(${first * this.rowHeight}px)`;
    for (let i = first; i < Math.min(this.items.length, first + count); i++) {
      const row = this.renderRow(this.items[i], i, i === this.selected);
      row.style.height = `${this.rowHeight}px`;
      this.win.append(row);
    }
    if (this.items.length === 0 && this.done) this.win.append(h("div", { class: "empty" }, "Nothing here."));
  }

  /** Keyboard selection (j/k); returns the selected item. */
  move(by: number): T | undefined {
    if (!this.items.length) return undefined;
    this.selected = Math.min(this.items.length - 1, Math.max(0, this.selected + by));
    const top = this.selected * this.rowHeight;
    if (top < this.el.scrollTop) this.el.scrollTop = top;
    else if (top + this.rowHeight > this.el.scrollTop + this.el.clientHeight) this.el.scrollTop = top + this.rowHeight - this.el.clientHeight;
    this.paint();
    void this.maybeLoad();
    return this.items[this.selected];
  }

  current(): T | undefined {
    return this.selected >= 0 ? this.items[this.selected] : undefined;
  }
}
