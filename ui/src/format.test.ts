import { SHOWN_BODY, bodyText, curlFor, proxyBase, relative, seriesFor, sparkPoints } from "./format";

describe("format", () => {
  it("renders relative times both ways", () => {
    expect(relative(0, 90_000)).toBe("1m ago");
    expect(relative(7_500_000, 0)).toBe("in 2h 5m");
    expect(relative(null, 0)).toBe("—");
  });

  it("names the proxy by the address it reports, reached by the page's host when it listens on every interface", () => {
    expect(proxyBase("127.0.0.1:9100", "console.example")).toEqual({ base: "http://127.0.0.1:9100", known: true });
    expect(proxyBase("0.0.0.0:8700", "gw.internal")).toEqual({ base: "http://gw.internal:8700", known: true });
    expect(proxyBase("[::]:8700", "")).toEqual({ base: "http://127.0.0.1:8700", known: true });
    expect(proxyBase("[::1]:8700", "x")).toEqual({ base: "http://[::1]:8700", known: true });
    expect(proxyBase(null, "x")).toEqual({ base: "http://127.0.0.1:8700", known: false });
  });

  it("builds a copy-pasteable curl with quoting", () => {
    const c = curlFor({ method: "POST", path: "/v1/charges", headers: [["idempotency-key", "k'1"]], body: '{"a":1}' }, "http://127.0.0.1:8700");
    expect(c).toBe(`curl -X POST 'http://127.0.0.1:8700/v1/charges' -H 'idempotency-key: k'\\''1' --data-raw '{"a":1}'`);
  });

  it("pretty-prints JSON bodies and leaves others", () => {
    expect(bodyText('{"a":1}')).toBe('{\n  "a": 1\n}');
    expect(bodyText("a=1")).toBe("a=1");
    expect(bodyText({ hex: "ff00" })).toBe("<2 bytes, not UTF-8>");
    // A large body is cut, not laid out whole (nor parsed to be pretty-printed), and says so.
    const big = `{"rows":"${"x".repeat(SHOWN_BODY)}"}`;
    const shown = bodyText(big, 42);
    expect(shown.startsWith(big.slice(0, SHOWN_BODY))).toBe(true);
    expect(shown.length).toBeLessThan(SHOWN_BODY + 200);
    expect(shown).toContain("and 11 more characters");
    expect(shown).toContain("idemgate show 42 --json");
  });

  it("aligns hourly series to the current hour", () => {
    const h = 3_600_000;
    const now = 10 * h + 5;
    const s = seriesFor([{ hour: 10 * h, kind: "complete", count: 3 }, { hour: 8 * h, kind: "complete", count: 2 }, { hour: 9 * h, kind: "claim", count: 7 }], ["complete"], now, 4);
    expect(s).toEqual([0, 2, 0, 3]);
    expect(sparkPoints([0, 1], 10, 10)).toBe("2.5,9.0 7.5,1.0");
  });
});
