#!/usr/bin/env python3
# docs/build.py: builds the documentation site (docs/README.md): Doxygen XML of lib/, the staged
# pages (docs/stage.py), Sphinx with warnings as errors, then a check that every header of lib/
# has its section, with declarations, in the API reference. The `docs` target and the docs.build
# test both run this. A Doxygen or Sphinx warning fails the build, as a compiler warning does.
import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

sys.dont_write_bytecode = True  # importing stage.py must not write __pycache__ into docs/
import stage as staging  # noqa: E402  (docs/stage.py)

MODULES = ["sphinx", "breathe", "myst_parser", "nbsphinx", "nbconvert"]
SETUP_HINT = "run scripts/setup (it installs doxygen, Sphinx, Breathe, MyST, nbsphinx and pandoc)"


def fail(message):
    print(f"docs: {message}", file=sys.stderr)
    sys.exit(1)


def check_tools(doxygen):
    missing = [m for m in MODULES if importlib.util.find_spec(m) is None]
    if missing:
        fail(f"expected {sys.executable} to import {', '.join(MODULES)}; it cannot import "
             f"{', '.join(missing)}: {SETUP_HINT}, then configure again (cmake --preset default)")
    if not doxygen or not Path(doxygen).is_file():
        fail(f"expected doxygen, found none ('{doxygen}'): {SETUP_HINT}, then configure again")
    if shutil.which("pandoc") is None:
        fail(f"expected pandoc on PATH (nbsphinx converts notebook Markdown with it): {SETUP_HINT}")


def run_doxygen(doxygen, root, out):
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TINYSCALE_LIB=str(root / "lib"), TINYSCALE_DOXYGEN_OUT=str(out))
    result = subprocess.run([doxygen, str(root / "docs" / "Doxyfile")], cwd=out, env=env)
    log = out / "warnings.log"
    warnings = log.read_text() if log.is_file() else ""
    if result.returncode != 0 or warnings.strip():
        fail(f"Doxygen reported problems in the header comments of lib/ (exit "
             f"{result.returncode}):\n{warnings}fix the `///` comments it names (an unknown "
             "command such as \\r is often a backslash that needs backquotes)")
    return keep_unchanged(out / "xml", out / "xml-current")


def keep_unchanged(fresh, kept):
    """Copies Doxygen's fresh XML over `kept` file by file, leaving unchanged files (and their
    times) alone, so Sphinx rebuilds only the API pages whose headers changed."""
    names = {p.name for p in fresh.iterdir()}
    kept.mkdir(exist_ok=True)
    for old in kept.iterdir():
        if old.name not in names:
            old.unlink()
    for name in names:
        data = (fresh / name).read_bytes()
        if not (kept / name).is_file() or (kept / name).read_bytes() != data:
            (kept / name).write_bytes(data)
    return kept


def doxygen_files(xml):
    """{path under lib/: whether Doxygen found declarations in it} for every header it read."""
    files = {}
    for compound in ElementTree.parse(xml / "index.xml").getroot().iter("compound"):
        if compound.get("kind") == "file":
            definition = ElementTree.parse(xml / f"{compound.get('refid')}.xml").find("compounddef")
            files[definition.find("location").get("file")] = bool(
                definition.findall("innerclass") or definition.findall("innernamespace"))
    return files


def check_reference(root, xml, html_dir):
    """Every lib/**/*.hpp has its section in the API reference, with declarations if it has any."""
    problems, pages = [], {}
    headers = sorted(p.relative_to(root).as_posix() for p in (root / "lib").rglob("*.hpp"))
    declares = doxygen_files(xml)
    for header in headers:
        page = html_dir / (staging.api_page_of(header) + ".html")
        name = page.relative_to(html_dir)
        if page not in pages:
            text = page.read_text(encoding="utf-8") if page.is_file() else ""
            pages[page] = (text, sorted(m.start() for m in re.finditer(r'id="api-lib-', text)))
        text, starts = pages[page]
        start = text.find(f'id="{staging.label_for(header)}"')
        inside = header.removeprefix("lib/")
        if inside not in declares:
            problems.append(f"{header}: Doxygen did not read it (check INPUT in docs/Doxyfile)")
        elif start < 0:
            problems.append(f"{header}: no section in {name} (docs/stage.py writes them)")
        else:
            end = min([s for s in starts if s > start] + [len(text)])
            if declares[inside] and '<dl class="cpp' not in text[start:end]:
                problems.append(f"{header}: its section in {name} shows no declaration although "
                                "Doxygen found some (Breathe did not match the file's path)")
    if problems:
        fail("the API reference misses headers of lib/:\n  " + "\n  ".join(problems))
    return len(headers)


def main():
    parser = argparse.ArgumentParser(description="Builds the tinyscale documentation site.")
    parser.add_argument("--source-root", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="e.g. build/default/docs")
    parser.add_argument("--doxygen", default="", help="the doxygen program")
    parser.add_argument("--executed-notebooks", type=Path, required=True)
    parser.add_argument("--tinyscale", type=Path, required=True, help="the tinyscale program")
    args = parser.parse_args()
    start = time.monotonic()
    check_tools(args.doxygen)
    root, out = args.source_root.resolve(), args.out.resolve()

    xml = run_doxygen(args.doxygen, root, out / "doxygen")
    if staging.main(["--source-root", str(root), "--stage", str(out / "stage"),
                     "--executed-notebooks", str(args.executed_notebooks),
                     "--tinyscale", str(args.tinyscale)]) != 0:
        fail("staging the pages failed (above)")
    sphinx = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
              "-d", str(out / "doctrees"), "-D", f"breathe_projects.tinyscale={xml}",
              str(out / "stage"), str(out / "html")]
    if subprocess.run(sphinx).returncode != 0:
        # Sphinx keeps its environment even when it warned, so the next run would skip the pages
        # that warned and pass. Dropping the environment makes every run after a failure re-read
        # all pages and report the same warnings until they are fixed.
        shutil.rmtree(out / "doctrees", ignore_errors=True)
        fail("Sphinx reported warnings (above; each names the staged page under "
             f"{out / 'stage'}, whose path mirrors the source file's)")
    count = check_reference(root, xml, out / "html")
    print(f"docs: the site is {out / 'html' / 'index.html'} ({count} headers in the API reference, "
          f"{time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    main()
