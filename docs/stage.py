#!/usr/bin/env python3
# docs/stage.py: assembles the Sphinx source tree of the site in the build tree (docs/README.md).
# The staged tree mirrors the repository (chapters/01_x/README.md stays chapters/01_x/README.md),
# so links between pages work as written. The one thing to get right is every other relative
# link: a link to a repository file that is not a page (../../lib/ops/matmul.cpp) is rewritten to
# a generated page that shows the file (repository/lib/ops/matmul.cpp.md), a link to a header to
# its section of the API reference, and a link to nothing is an error naming file and line.
import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

# Markdown pages beside the chapters, in the order of the site's "Guides" section.
GUIDES = ["README.md", "docs/architecture.md", "docs/theory.md", "docs/glossary.md",
          "configs/README.md", "configs/topologies/README.md", "launch/README.md",
          "lib/comm/README.md", "lib/data/README.md", "docs/README.md"]
SOURCE_PAGES = "repository"  # generated pages that show a repository file
SOURCE_COPIES = "_repository_files"  # the files those pages include (not pages themselves)
LEXERS = {".cpp": "cpp", ".hpp": "cpp", ".h": "cpp", ".cu": "cuda", ".cuh": "cuda",
          ".toml": "toml", ".py": "python", ".sh": "bash", ".json": "json", ".ipynb": "json",
          ".cmake": "cmake", ".yml": "yaml", ".yaml": "yaml"}

# What the API reference shows of a header: its public and protected declarations, not the private
# members (Breathe's `sections` option, applied to the file, its namespaces and its classes).
PUBLIC_SECTIONS = " ".join([
    "briefdescription", "detaileddescription", "derivedcompoundref", "user-defined",
    "public-type", "public-func", "public-attrib", "public-static-func", "public-static-attrib",
    "protected-type", "protected-func", "protected-attrib", "protected-static-func",
    "protected-static-attrib", "friend", "related", "define", "typedef", "concept", "enum",
    "func", "var", "innerclass", "innernamespace"])

FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:[^\n]|\n(?![ \t]*\n))*?(?<!`)\1(?!`)")  # within a paragraph
# [text](target "title") and ![alt](image): the text may hold one level of brackets.
LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]"
                  r"\(\s*(<[^>]*>|[^)\s]+)(\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
LINK_DEFINITION = re.compile(r"^( {0,3}\[[^\]]+\]:[ \t]*)(\S+)", re.M)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def label_for(path):
    """The Sphinx label of a header's (or a lib folder's) section in the API reference."""
    return "api-" + re.sub(r"[^a-z0-9]+", "-", str(path).lower()).strip("-")


def api_page_of(header):
    """lib/comm/threads/fabric.hpp -> api/comm; lib/tinyscale.hpp -> api/lib."""
    parts = PurePosixPath(header).parts
    return "api/" + (parts[1] if len(parts) > 2 else "lib")


class Stage:
    def __init__(self, root, out):
        self.root, self.out = root, out
        self.written = set()
        self.errors = []
        self.pages = set()  # repository-relative paths of the Markdown/notebook pages
        self.pending = []  # pages still to be written (linked Markdown files join the queue)
        self.orphans = set()  # pages reached only through links, not through a table of contents
        self.headers = sorted(p.relative_to(root).as_posix() for p in (root / "lib").rglob("*.hpp"))

    # -- writing --------------------------------------------------------------------------------
    def write(self, rel, content):
        """Writes stage/rel; an unchanged file is left alone, so Sphinx rebuilds what changed."""
        target = self.out / rel
        data = content.encode() if isinstance(content, str) else content
        if not target.is_file() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        self.written.add(PurePosixPath(rel).as_posix())

    def remove_stale(self):
        for path in sorted(self.out.rglob("*"), reverse=True):
            rel = path.relative_to(self.out).as_posix()
            if path.is_file() and rel not in self.written:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()

    def add_page(self, rel, orphan=False):
        if rel not in self.pages:
            self.pages.add(rel)
            self.pending.append(rel)
            if orphan:
                self.orphans.add(rel)

    # -- links ----------------------------------------------------------------------------------
    def rewrite(self, text, source):
        """Rewrites the relative links of Markdown `text` that lives at repository path `source`."""
        out, chunk, chunk_line, fence = [], [], 1, None
        for number, line in enumerate(text.splitlines(keepends=True), start=1):
            match = FENCE.match(line)
            if fence is not None:  # inside a code block: copied as it is
                out.append(line)
                closing = match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(
                    fence) and not line.strip().strip(fence[0])
                fence = None if closing else fence
                chunk_line = number + 1
            elif match:
                out.append(self.rewrite_prose("".join(chunk), source, chunk_line))
                out.append(line)
                chunk, fence = [], match.group(1)
            else:
                chunk.append(line)
        out.append(self.rewrite_prose("".join(chunk), source, chunk_line))
        return "".join(out)

    def rewrite_prose(self, text, source, first_line):
        spans = [m.span() for m in CODE_SPAN.finditer(text)]

        def in_code(pos):
            return any(start <= pos < end for start, end in spans)

        def line_of(pos):
            return first_line + text.count("\n", 0, pos)

        def link(m):
            if in_code(m.start()):
                return m.group(0)
            image, label, target, title = m.group(1), m.group(2), m.group(3), m.group(4) or ""
            new = self.resolve(target.strip("<>"), source, line_of(m.start()), bool(image))
            if new is None:  # a folder without a page: keep the words, drop the link
                return label
            return f"{image}[{label}]({new}{title})"

        def definition(m):
            new = self.resolve(m.group(2), source, line_of(m.start()), False)
            return m.group(1) + (new or m.group(2))

        return LINK_DEFINITION.sub(definition, LINK.sub(link, text))

    def resolve(self, target, source, line, image):
        """The link that replaces `target` (relative to `source`), or None to drop the link."""
        if SCHEME.match(target) or target.startswith("#"):
            return target
        path, _, anchor = target.partition("#")
        anchor = "#" + anchor if anchor else ""
        base = PurePosixPath(source).parent
        rel = os.path.normpath(path.lstrip("/") if path.startswith("/") else str(base / path))
        rel = PurePosixPath(rel).as_posix()
        where = f"{source}:{line}"
        if rel.startswith("../") or rel == "..":
            self.errors.append(f"{where}: the link '{target}' leaves the repository; link to a "
                               "file inside it or use a full https:// address")
            return target
        file = self.root / rel
        if not file.exists():
            self.errors.append(f"{where}: the link '{target}' points at {rel}, which does not "
                               "exist; fix the path (it is relative to the page's folder)")
            return target

        def relative(to):
            return os.path.relpath(to, base.as_posix() or ".")

        if file.is_dir():
            if (file / "README.md").is_file():
                self.add_page(f"{rel}/README.md", orphan=True)
                return relative(f"{rel}/README.md") + anchor
            if rel == "lib":
                return relative("api/index.md")
            if rel.startswith("lib/"):
                return label_for(rel)
            return None
        if image:
            self.write(rel, file.read_bytes())
            return target
        if rel.endswith(".md") or (rel.endswith(".ipynb") and rel.startswith("notebooks/")):
            self.add_page(rel, orphan=True)
            return relative(rel) + anchor
        if rel in self.headers:
            return label_for(rel)
        return relative(self.source_page(rel))

    def source_page(self, rel):
        """Writes the page that shows repository file `rel`; returns the page's stage path."""
        page = f"{SOURCE_PAGES}/{rel}.md"
        if page not in self.written:
            data = (self.root / rel).read_bytes()
            self.write(f"{SOURCE_COPIES}/{rel}", data)
            name = PurePosixPath(rel).name
            suffix = PurePosixPath(rel).suffix
            lexer = LEXERS.get(suffix, "cmake" if name == "CMakeLists.txt" else "text")
            if not suffix and data.startswith(b"#!"):
                lexer = "python" if b"python" in data.split(b"\n", 1)[0] else "bash"
            self.write(page, f"---\norphan: true\n---\n# {rel}\n\n"
                             f"```{{literalinclude}} /{SOURCE_COPIES}/{rel}\n"
                             f":language: {lexer}\n:linenos:\n```\n")
        return page

    # -- pages ----------------------------------------------------------------------------------
    def stage_markdown(self, rel):
        text = self.rewrite((self.root / rel).read_text(encoding="utf-8"), rel)
        if rel in self.orphans and not text.startswith("---\n"):
            text = "---\norphan: true\n---\n" + text  # reached by links, not by a contents list
        self.write(rel, text)

    def stage_notebook(self, rel, executed_dir, tinyscale):
        """Stages the executed copy of notebook `rel` (running it here when there is none)."""
        source = self.root / rel
        copies = [d / source.name for d in (executed_dir, self.out.parent / "executed_notebooks")]
        fresh = [c for c in copies if c.is_file() and c.stat().st_mtime >= source.stat().st_mtime]
        executed = fresh[0] if fresh else self.execute_notebook(source, tinyscale)
        if executed is None:
            return
        notebook = json.loads(executed.read_text(encoding="utf-8"))
        for cell in notebook.get("cells", []):
            if cell.get("cell_type") == "markdown":
                text = cell["source"]  # a string, or a list of lines
                cell["source"] = self.rewrite("".join(text), rel)
        self.write(rel, json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")

    def execute_notebook(self, source, tinyscale):
        """Executes a notebook as its ctest entry does (notebooks/CMakeLists.txt)."""
        out_dir = self.out.parent / "executed_notebooks"
        out_dir.mkdir(parents=True, exist_ok=True)
        print(f"stage: no up-to-date executed copy of {source.name}; executing it now")
        command = [sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute",
                   "--ExecutePreprocessor.timeout=300", "--output-dir", str(out_dir), str(source)]
        env = dict(os.environ, TINYSCALE_BIN=str(tinyscale), TINYSCALE_SOURCE_DIR=str(self.root),
                   PYDEVD_DISABLE_FILE_VALIDATION="1")
        result = subprocess.run(command, cwd=source.parent, env=env, capture_output=True,
                                text=True)
        if result.returncode != 0:
            self.errors.append(f"{source.relative_to(self.root)}: executing it failed "
                               f"(exit {result.returncode}):\n{result.stderr[-4000:]}\nrun "
                               "`ctest --preset default -L notebooks --output-on-failure` to see "
                               "why")
            return None
        return out_dir / source.name

    def chapter_map(self):
        """The README's chapter table, each chapter that has a folder linked to its page."""
        readme = (self.root / "README.md").read_text(encoding="utf-8")
        section = re.search(r"^## Chapters\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
        rows = [l for l in (section.group(1) if section else "").splitlines() if l.startswith("|")]
        if len(rows) < 3:
            self.errors.append("README.md: expected a '## Chapters' section with a table "
                               "(| | chapter | status |), found none; docs/index.md shows it")
            return ""
        for i, row in enumerate(rows[2:], start=2):
            cells = row.split("|")
            folder = sorted((self.root / "chapters").glob(cells[1].strip() + "_*/README.md"))
            if folder and "](" not in cells[2]:
                cells[2] = f" [{cells[2].strip()}]({folder[0].relative_to(self.root).as_posix()}) "
                rows[i] = "|".join(cells)
        return self.rewrite("\n".join(rows) + "\n", "index.md")

    def toctree(self, caption, entries, hidden=False, titles={}):
        if not entries:
            return ""
        names = "\n".join((f"{titles[e]} <{PurePosixPath(e).with_suffix('')}>" if e in titles
                           else str(PurePosixPath(e).with_suffix(""))) for e in entries)
        options = ":hidden:\n" if hidden else ""
        return f"```{{toctree}}\n:caption: {caption}\n:maxdepth: 1\n{options}\n{names}\n```\n\n"

    def api_pages(self, folders):
        """api/index.md and one page per lib folder, one doxygenfile section per header."""
        by_page = {}
        for header in self.headers:
            by_page.setdefault(api_page_of(header), []).append(header)
        for page, headers in by_page.items():
            folder = page.removeprefix("api/")
            title = "lib/ (the whole API in one include)" if folder == "lib" else f"lib/{folder}/"
            here = "lib" if folder == "lib" else f"lib/{folder}"
            lines = [f"({label_for(here)})=",
                     f"# {title}", ""]
            if folders.get(folder):
                lines += [folders[folder], ""]
            if (self.root / f"lib/{folder}/README.md").is_file():
                self.add_page(f"lib/{folder}/README.md", orphan=True)
                guide = f"lib/{folder}/README.md"
                lines += [f"The folder's guide: [{guide}](../{guide}).", ""]
            for header in headers:
                inside = header.removeprefix("lib/")
                source = f"../{self.source_page(header)}"
                lines += [f"({label_for(header)})=", f"## {inside}", "",
                          opening_comment(self.root / header), "", f"Source: [{header}]({source})",
                          "", f"```{{doxygenfile}} {inside}", ":project: tinyscale",
                          f":sections: {PUBLIC_SECTIONS}", "```", ""]
            for sub in sorted({str(PurePosixPath(h).parent) for h in headers} - {here}):
                lines.insert(0, f"({label_for(sub)})=")  # lib/comm/threads -> the comm page
            self.write(f"{page}.md", "\n".join(lines))
        index = ["# API reference", "",
                 "Every public header of `lib/`, one page per folder, generated from the headers' "
                 "Doxygen comments. Each header opens with what it is, the chapter that introduces "
                 "it and the one thing that is easy to get wrong; its declarations follow.", "",
                 self.toctree("Folders", sorted(f"{p.removeprefix('api/')}.md" for p in by_page))]
        self.write("api/index.md", "\n".join(index))
        return "api/index.md"


def opening_comment(header):
    """The `//` lines a header opens with (what it is, its chapter, the trap), as one paragraph."""
    words = []
    for line in header.read_text(encoding="utf-8").splitlines():
        if not line.startswith("//"):
            break
        words.append(line.lstrip("/").strip())
    return " ".join(words)


def lib_folders(root):
    """Each lib folder's one-line description, from the README's "What is here" block."""
    readme = (root / "README.md").read_text(encoding="utf-8")
    return {m.group(1): " ".join(m.group(2).split()) for m in
            re.finditer(r"^lib/(\w+)/ +(.+)$", readme, re.M)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source-root", type=Path, required=True)
    parser.add_argument("--stage", type=Path, required=True, help="the Sphinx source dir to fill")
    parser.add_argument("--executed-notebooks", type=Path, required=True,
                        help="where ctest -L notebooks writes the executed notebooks")
    parser.add_argument("--tinyscale", type=Path, required=True,
                        help="the tinyscale program, for a notebook that has to be executed here")
    args = parser.parse_args(argv)
    root, docs = args.source_root.resolve(), args.source_root.resolve() / "docs"
    stage = Stage(root, args.stage.resolve())

    for name in ("conf.py", "namespace_scope.py"):
        stage.write(name, (docs / name).read_bytes())
    chapters = sorted(p.relative_to(root).as_posix() for p in root.glob("chapters/*/README.md"))
    exercises = [p.relative_to(root).as_posix() for pattern in
                 ("exercises/README.md", "exercises/*/README.md", "solutions/README.md",
                  "solutions/*/README.md") for p in sorted(root.glob(pattern))]
    notebooks = [p.relative_to(root).as_posix() for p in sorted(root.glob("notebooks/README.md"))
                 + sorted(root.glob("notebooks/*.ipynb"))]
    missing = [g for g in GUIDES if not (root / g).is_file()]
    if missing:
        stage.errors.append(f"docs/stage.py lists {', '.join(missing)} as pages but they do not "
                            "exist: restore them or remove them from GUIDES in docs/stage.py")
    for rel in chapters + GUIDES + exercises + notebooks:
        if not rel in missing:
            stage.add_page(rel)

    api = stage.api_pages(lib_folders(root))
    contents = (stage.toctree("Chapters", chapters, hidden=True)  # the chapter map links them
                + stage.toctree("Guides", GUIDES, titles={"README.md": "The README"})
                + stage.toctree("Exercises", exercises) + stage.toctree("Notebooks", notebooks)
                + stage.toctree("Reference", [api]))
    index = (docs / "index.md").read_text(encoding="utf-8")
    for marker, text in (("<!-- stage: chapter-map -->", stage.chapter_map()),
                         ("<!-- stage: contents -->", contents)):
        if marker not in index:
            stage.errors.append(f"docs/index.md: expected the line '{marker}', found none; "
                                "put it back where the generated text belongs")
        index = index.replace(marker, text)
    stage.write("index.md", index)

    while stage.pending:
        rel = stage.pending.pop(0)
        if rel.endswith(".ipynb"):
            stage.stage_notebook(rel, args.executed_notebooks, args.tinyscale)
        else:
            stage.stage_markdown(rel)
    stage.remove_stale()
    if stage.errors:
        print("stage: the site's pages have problems:\n  " + "\n  ".join(stage.errors),
              file=sys.stderr)
        return 1
    print(f"stage: {len(stage.pages)} pages and {len(stage.headers)} headers in {stage.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
