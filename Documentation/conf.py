# SPDX-License-Identifier: GPL-2.0-only OR MIT
# Sphinx configuration: `make htmldocs` builds build/htmldocs with warnings
# as errors (Debian's python3-sphinx, no extensions beyond Sphinx's own).
project = 'svmbatch'
author = 'the svmbatch developers'
copyright = '2026, ' + author
root_doc = 'index'
exclude_patterns = []
html_theme = 'alabaster'
html_static_path = []
highlight_language = 'none'
