#!/usr/bin/env python3
"""The library's public API, one line per item, from rustdoc's JSON output.

    python3 scripts/public_api.py --write   # regenerate docs/public-api.txt
    python3 scripts/public_api.py --check   # CI: fail on a fred type in the API,
                                            # or on a change not written to the file

It runs `cargo rustdoc --output-format json` (through RUSTC_BOOTSTRAP=1 on the
stable toolchain) for the library with the features a user can turn on, walks
the public items from the crate root (re-exports followed, `#[doc(hidden)]`
items left out, as rustdoc does), and renders each as `kind path: signature`.

Two checks, for review rather than after release:
* no public item may name a type of the `fred` crate: the Redis library is an
  implementation detail (fred 11 must not be a breaking release of this crate);
* the listing is committed as docs/public-api.txt; a change to the API that the
  commit does not also write there fails CI, so every break shows in the diff.
"""
import json
import os
import subprocess
import sys

FEATURES = "redisson-config,metrics,blocking"
LISTING = "docs/public-api.txt"


def build():
    # RUSTC_BOOTSTRAP=1 for rustdoc alone, through a RUSTDOC wrapper: set for
    # cargo it would enter every dependency's fingerprint, and the shared
    # target/ would be rebuilt from scratch (a minute on two cores).
    os.makedirs("target", exist_ok=True)
    wrapper = os.path.abspath("target/rustdoc-unstable")
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\nRUSTC_BOOTSTRAP=1 exec "${REAL_RUSTDOC:-rustdoc}" "$@"\n')
    os.chmod(wrapper, 0o755)
    env = dict(os.environ, RUSTDOC=wrapper, REAL_RUSTDOC=os.environ.get("RUSTDOC", "rustdoc"))
    subprocess.run(
        ["cargo", "rustdoc", "--locked", "-q", "-p", "redisson-lock", "--lib", "--features", FEATURES,
         "--", "-Z", "unstable-options", "--output-format", "json"],
        check=True, env=env)
    with open("target/doc/redisson_lock.json") as f:
        return json.load(f)


class Api:
    def __init__(self, doc):
        self.doc = doc
        self.index = doc["index"]
        self.paths = doc["paths"]
        self.crates = doc["external_crates"]
        self.lines = set()
        self.fred = set()
        self.seen = set()

    def item(self, id_):
        return self.index.get(str(id_))

    def crate_of(self, id_):
        p = self.paths.get(str(id_))
        if not p:
            return None
        cid = p["crate_id"]
        return "redisson_lock" if cid == 0 else self.crates.get(str(cid), {}).get("name")

    # -- types ------------------------------------------------------------
    def ty(self, t, where):
        if t is None:
            return "()"
        (kind, v), = t.items()
        if kind == "resolved_path":
            if self.crate_of(v["id"]) == "fred":
                self.fred.add(f"{where}: {v['path']}")
            return v["path"] + self.args(v.get("args"), where)
        if kind == "generic":
            return v
        if kind == "primitive":
            return v
        if kind == "borrowed_ref":
            life = f"{v['lifetime']} " if v.get("lifetime") else ""
            mut = "mut " if v.get("is_mutable") else ""
            return f"&{life}{mut}{self.ty(v['type'], where)}"
        if kind == "tuple":
            return "(" + ", ".join(self.ty(x, where) for x in v) + ")"
        if kind == "slice":
            return f"[{self.ty(v, where)}]"
        if kind == "array":
            return f"[{self.ty(v['type'], where)}; {v['len']}]"
        if kind in ("impl_trait", "dyn_trait"):
            bounds = v if kind == "impl_trait" else v.get("traits", [])
            parts = []
            for b in bounds:
                tb = b.get("trait_bound", b) if isinstance(b, dict) else None
                if tb and "trait" in tb:
                    tr = tb["trait"]
                    if self.crate_of(tr["id"]) == "fred":
                        self.fred.add(f"{where}: {tr['path']}")
                    parts.append(tr["path"] + self.args(tr.get("args"), where))
                elif isinstance(b, dict) and "outlives" in b:
                    parts.append(b["outlives"])
            word = "impl" if kind == "impl_trait" else "dyn"
            return f"{word} " + " + ".join(parts)
        if kind == "qualified_path":
            return f"<{self.ty(v['self_type'], where)}>::{v['name']}"
        if kind == "raw_pointer":
            return ("*mut " if v.get("is_mutable") else "*const ") + self.ty(v["type"], where)
        if kind == "function_pointer":
            return "fn(..)"
        return kind

    def args(self, a, where):
        if not a or "angle_bracketed" not in a:
            if a and "parenthesized" in a:
                p = a["parenthesized"]
                ins = ", ".join(self.ty(x, where) for x in p.get("inputs", []))
                out = self.ty(p["output"], where) if p.get("output") else "()"
                return f"({ins}) -> {out}"
            return ""
        ab = a["angle_bracketed"]
        parts = []
        for x in ab.get("args", []):
            if "type" in x:
                parts.append(self.ty(x["type"], where))
            elif "lifetime" in x:
                parts.append(x["lifetime"])
            elif "const" in x:
                parts.append(str(x["const"].get("expr", "_")))
        for c in ab.get("constraints", []):
            binding = c.get("binding", {})
            if "equality" in binding and "type" in binding["equality"]:
                parts.append(f"{c['name']} = {self.ty(binding['equality']['type'], where)}")
        return "<" + ", ".join(parts) + ">" if parts else ""

    def sig(self, f, where):
        s = f["sig"]
        ins = []
        for name, t in s["inputs"]:
            if name == "self":
                rendered = self.ty(t, where)
                ins.append({"Self": "self", "&Self": "&self", "&mut Self": "&mut self"}.get(rendered, f"self: {rendered}"))
            else:
                ins.append(f"{name}: {self.ty(t, where)}")
        out = f" -> {self.ty(s['output'], where)}" if s.get("output") else ""
        asyncness = "async " if f["header"].get("is_async") else ""
        generics = self.generics(f.get("generics"), where)
        return f"{asyncness}fn{generics}({', '.join(ins)}){out}"

    def generics(self, g, where):
        if not g:
            return ""
        parts = []
        for p in g.get("params", []):
            kind = p.get("kind", {})
            if "type" in kind:
                if kind["type"].get("is_synthetic"):
                    continue
                bounds = []
                for b in kind["type"].get("bounds", []):
                    tb = b.get("trait_bound")
                    if tb:
                        if self.crate_of(tb["trait"]["id"]) == "fred":
                            self.fred.add(f"{where}: {tb['trait']['path']}")
                        bounds.append(tb["trait"]["path"] + self.args(tb["trait"].get("args"), where))
                parts.append(p["name"] + (": " + " + ".join(bounds) if bounds else ""))
            elif "lifetime" in kind:
                parts.append(p["name"])
            elif "const" in kind:
                parts.append(f"const {p['name']}")
        for w in g.get("where_predicates", []):
            bp = w.get("bound_predicate")
            if bp:
                self.ty(bp["type"], where)
                for b in bp.get("bounds", []):
                    tb = b.get("trait_bound")
                    if tb and self.crate_of(tb["trait"]["id"]) == "fred":
                        self.fred.add(f"{where}: {tb['trait']['path']}")
        return "<" + ", ".join(parts) + ">" if parts else ""

    # -- items ------------------------------------------------------------
    def add(self, line):
        self.lines.add(line)

    def walk_module(self, id_, path):
        m = self.item(id_)
        for child in m["inner"]["module"]["items"]:
            self.walk(child, path)

    def walk(self, id_, path):
        it = self.item(id_)
        if it is None or it.get("visibility") != "public":
            return
        (kind, inner), = it["inner"].items()
        if kind == "use":
            if inner.get("is_glob"):
                return
            target = inner.get("id")
            if target is None:
                return
            name = inner["name"]
            t = self.item(target)
            if t is None:
                # An item of another crate re-exported as ours.
                crate = self.crate_of(target) or "?"
                if crate == "fred":
                    self.fred.add(f"{path}::{name}: re-exports fred's {inner['source']}")
                self.add(f"pub use {path}::{name} = {inner['source']} (from {crate})")
                return
            self.walk_named(target, path, name)
            return
        self.walk_named(id_, path, it["name"])

    def walk_named(self, id_, path, name):
        key = (id_, path, name)
        if key in self.seen:
            return
        self.seen.add(key)
        it = self.item(id_)
        (kind, inner), = it["inner"].items()
        here = f"{path}::{name}"
        if kind == "module":
            self.add(f"mod {here}")
            self.walk_module(id_, here)
        elif kind in ("struct", "enum", "union"):
            self.add(f"{kind} {here}{self.generics(inner.get('generics'), here)}")
            if kind == "struct":
                k = inner.get("kind", {})
                fields = []
                if isinstance(k, dict) and "plain" in k:
                    fields = k["plain"].get("fields", [])
                elif isinstance(k, dict) and "tuple" in k:
                    fields = [f for f in k["tuple"] if f is not None]
                for f in fields:
                    fi = self.item(f)
                    if fi and fi.get("visibility") == "public":
                        self.add(f"field {here}.{fi['name']}: {self.ty(fi['inner']['struct_field'], here)}")
            if kind == "enum":
                for v in inner.get("variants", []):
                    vi = self.item(v)
                    vk = vi["inner"]["variant"]["kind"]
                    fields = []
                    if isinstance(vk, dict) and "struct" in vk:
                        fields = [self.item(f) for f in vk["struct"]["fields"]]
                        shape = "{ " + ", ".join(f"{f['name']}: {self.ty(f['inner']['struct_field'], here)}" for f in fields) + " }"
                    elif isinstance(vk, dict) and "tuple" in vk:
                        fields = [self.item(f) for f in vk["tuple"] if f is not None]
                        shape = "(" + ", ".join(self.ty(f['inner']['struct_field'], here) for f in fields) + ")"
                    else:
                        shape = ""
                    self.add(f"variant {here}::{vi['name']}{shape}")
            for impl_id in inner.get("impls", []):
                self.walk_impl(impl_id, here)
        elif kind == "trait":
            self.add(f"trait {here}{self.generics(inner.get('generics'), here)}")
            for m in inner.get("items", []):
                mi = self.item(m)
                if mi is None:
                    continue
                (mk, minner), = mi["inner"].items()
                if mk == "function":
                    self.add(f"trait-fn {here}::{mi['name']}: {self.sig(minner, here)}")
                elif mk == "assoc_type":
                    self.add(f"trait-type {here}::{mi['name']}")
        elif kind == "function":
            self.add(f"fn {here}: {self.sig(inner, here)}")
        elif kind == "type_alias":
            self.add(f"type {here} = {self.ty(inner['type'], here)}")
        elif kind in ("constant", "static"):
            t = inner.get("type") or inner.get("const", {}).get("type")
            self.add(f"{kind} {here}: {self.ty(t, here) if t else '?'}")
        elif kind == "macro":
            self.add(f"macro {here}")
        else:
            self.add(f"{kind} {here}")

    def walk_impl(self, impl_id, owner):
        imp = self.item(impl_id)
        if imp is None:
            return
        inner = imp["inner"]["impl"]
        if inner.get("is_synthetic") or inner.get("blanket_impl") is not None:
            return
        trait = inner.get("trait")
        if trait is not None:
            tname = trait["path"]
            # Trait impls name their trait once; their methods are the trait's.
            self.add(f"impl {tname}{self.args(trait.get('args'), owner)} for {owner}")
            return
        for m in inner.get("items", []):
            mi = self.item(m)
            if mi is None or mi.get("visibility") != "public":
                continue
            (mk, minner), = mi["inner"].items()
            if mk == "function":
                self.add(f"fn {owner}::{mi['name']}: {self.sig(minner, owner)}")
            elif mk == "assoc_const":
                self.add(f"const {owner}::{mi['name']}")


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "--check"
    doc = build()
    api = Api(doc)
    api.walk_module(doc["root"], "redisson_lock")
    listing = "\n".join(sorted(api.lines)) + "\n"
    if api.fred:
        print("the public API names fred types (keep them behind the crate's own):", file=sys.stderr)
        for line in sorted(api.fred):
            print(f"  {line}", file=sys.stderr)
        sys.exit(1)
    if mode == "--write":
        with open(LISTING, "w") as f:
            f.write(listing)
        print(f"{LISTING}: {len(api.lines)} public items")
        return
    try:
        committed = open(LISTING).read()
    except FileNotFoundError:
        committed = ""
    if committed != listing:
        import difflib
        diff = difflib.unified_diff(committed.splitlines(), listing.splitlines(),
                                    LISTING + " (committed)", "the API now", lineterm="")
        print("\n".join(diff))
        print(f"\nThe public API changed: if it is meant to, run `python3 scripts/public_api.py --write`, "
              f"commit {LISTING}, and say so in CHANGELOG.md (a removal or a new signature is a break).",
              file=sys.stderr)
        sys.exit(1)
    print(f"public API: {len(api.lines)} items, no fred type, as committed in {LISTING}")


if __name__ == "__main__":
    main()
