// How Node's WHATWG URL parser reads request targets: one JSON reading per
// target on stdin (a JSON array of strings), written to stdout as a JSON array.
//
// A reading is what an application behind the proxy can tell apart: the path
// as `URL` resolves it, split into segments, each percent-decoded to bytes
// (hex), and the query as `URLSearchParams` parses it, grouped by name with
// every name's values in order.
"use strict";

function decodeToHex(text) {
  const bytes = Buffer.from(text, "utf8");
  const out = [];
  for (let i = 0; i < bytes.length; i++) {
    const hex = bytes.slice(i + 1, i + 3).toString("latin1");
    if (bytes[i] === 0x25 && /^[0-9a-fA-F]{2}$/.test(hex)) {
      out.push(parseInt(hex, 16));
      i += 2;
    } else {
      out.push(bytes[i]);
    }
  }
  return Buffer.from(out).toString("hex");
}

function reading(target) {
  const url = new URL("http://h" + target);
  const path = url.pathname.split("/").map(decodeToHex);
  const groups = new Map();
  for (const [name, value] of url.searchParams) {
    if (!groups.has(name)) groups.set(name, []);
    groups.get(name).push(value);
  }
  const query = [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify({ path, query });
}

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  process.stdout.write(JSON.stringify(JSON.parse(input).map(reading)));
});
