# docs/conf.py: Sphinx configuration of the tinyscale site (docs/README.md). docs/build.py runs
# Sphinx on the staged copy of this folder and passes the Doxygen XML folder with
# -D breathe_projects.tinyscale=..., so nothing here names a path of the build tree.
import hashlib
import sys
from pathlib import Path

here = Path(__file__).parent
sys.path.insert(0, str(here))
namespace_scope_version = hashlib.sha1((here / "namespace_scope.py").read_bytes()).hexdigest()

project = "tinyscale"
author = "the tinyscale authors"
extensions = ["myst_parser", "breathe", "nbsphinx", "namespace_scope"]
source_suffix = {".md": "markdown", ".ipynb": "jupyter_notebook"}
exclude_patterns = ["_repository_files", "**.ipynb_checkpoints"]

# Markdown: headings get GitHub-style anchors, so `README.md#0-build-first` links work.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

# The API reference: every header through `doxygenfile`, C++ only.
breathe_default_project = "tinyscale"
breathe_projects = {"tinyscale": ""}  # set by docs/build.py
breathe_domain_by_extension = {"hpp": "cpp"}
breathe_default_members = ()

# Notebooks: ctest -L notebooks executes them; the site shows those executed copies as they are.
nbsphinx_execute = "never"

html_theme = "alabaster"
html_title = "tinyscale"
html_theme_options = {"description": "distributed LLM training from scratch, in C++",
                      "page_width": "1200px", "sidebar_width": "260px", "fixed_sidebar": True}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}
html_show_sourcelink = False
html_show_copyright = False
html_copy_source = False
highlight_language = "text"
