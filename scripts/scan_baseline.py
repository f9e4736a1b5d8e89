#!/usr/bin/env python3
"""Baseline: cisco-ai-mcp-scanner's offline YARA analyzer on the mcpgate scan corpus.

Runs the scanner's own static (offline) path exactly as `mcp-scanner static --tools F --analyzers yara`
does: StaticAnalyzer(analyzers=[YaraAnalyzer()]).scan_tools_file(F), where F is an MCP tools/list
JSON ({"tools": [...]}) built from the corpus lines, tools passed unmodified. For each tool that path
scans (a) the description and (b) json.dumps(tool minus description) (name, inputSchema, outputSchema,
annotations, ...), with the package's bundled rules.
Run through scripts/scan-baseline, which installs the scanner in a virtual environment.
"""
import asyncio, json, os, sys, tempfile
from collections import defaultdict
from importlib.metadata import version

from mcpscanner.core.analyzers.static_analyzer import StaticAnalyzer
from mcpscanner.core.analyzers.yara_analyzer import YaraAnalyzer

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "tests", "scan_corpus")
OUT = os.path.join(HERE, "..", "target", "scan-baseline")
FILES = ["benign", "benign2", "benign3", "benign4", "benign5", "benign6", "benign7", "benign8", "benign9", "benign10", "poisoned", "heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8", "heldout9", "heldout10", "heldout11", "heldout12", "heldout13", "heldout14", "heldout15",
         "benign_hard", "benign_hard5"]
HM = {"HIGH", "MEDIUM"}


async def scan_file(static, name):
    rows = [json.loads(l) for l in open(f"{CORPUS}/{name}.jsonl") if l.strip()]
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=OUT, delete=False) as fh:
        json.dump({"tools": [r["tool"] for r in rows]}, fh)
        path = fh.name
    try:
        res = await static.scan_tools_file(path)
    finally:
        os.unlink(path)
    assert len(res) == len(rows)
    out = []
    for r, s in zip(rows, res):
        assert s["status"] == "completed", (r["id"], s["status"], s.get("analyzer_errors"))
        fs = s["findings"]
        rules = sorted({f.details["raw_response"]["rule"] for f in fs})
        hm_rules = sorted({f.details["raw_response"]["rule"] for f in fs if str(f.severity).upper().split(".")[-1] in HM})
        where = sorted({f"{f.details['raw_response']['rule']}@{f.details['content_type']}" for f in fs})
        out.append((r, rules, hm_rules, where))
    return out


async def main():
    print(f"cisco-ai-mcp-scanner {version('cisco-ai-mcp-scanner')}, yara-python {version('yara-python')}")
    static = StaticAnalyzer(analyzers=[YaraAnalyzer()])  # default bundled rules
    results = {}
    for name in FILES:
        scanned = await scan_file(static, name)
        by_kind = defaultdict(lambda: [0, 0, 0])  # any, high/medium, total
        for r, rules, hm, where in scanned:
            results[r["id"]] = {"flagged": bool(rules), "findings": rules,
                                "high_medium_findings": hm, "where": where}
            k = r.get("kind", "all")
            by_kind[k][0] += bool(rules); by_kind[k][1] += bool(hm); by_kind[k][2] += 1
        tot = [sum(v[i] for v in by_kind.values()) for i in range(3)]
        print(f"\n== {name}: flagged(any) {tot[0]}/{tot[2]}, flagged(HIGH/MEDIUM) {tot[1]}/{tot[2]}")
        if not name.startswith("benign"):
            print(f"  {'kind':16} {'any':>8} {'hi/med':>8}")
            for k in sorted(by_kind):
                a, h, t = by_kind[k]
                print(f"  {k:16} {a:>3}/{t:<4} {h:>3}/{t:<4}")
        else:
            for r, rules, hm, where in scanned:
                if rules:
                    print(f"  FP {r['id']} {r.get('server', r.get('kind', ''))}/{r['tool'].get('name')}: {', '.join(where)}"
                          + ("" if hm else "  [LOW only]"))
    with open(f"{OUT}/results.json", "w") as fh:
        json.dump(results, fh, indent=1, sort_keys=True)
    print(f"\nper-id results: {OUT}/results.json")


if __name__ == "__main__":
    asyncio.run(main())
