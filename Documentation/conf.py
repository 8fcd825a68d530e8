# SPDX-License-Identifier: GPL-2.0-only OR MIT
# Sphinx configuration: `make htmldocs` builds build/htmldocs with warnings
# as errors (Debian's python3-sphinx, no extensions beyond Sphinx's own);
# `make man` builds the manual pages into build/man with `-t man`.
import pathlib
import re

project = 'svmbatch'
author = 'the svmbatch developers'
copyright = '2026, ' + author
root_doc = 'index'
exclude_patterns = []
html_theme = 'alabaster'
html_static_path = []
highlight_language = 'none'

# The manual pages.  Each page of man/ starts with a field list (Sphinx's
# file-wide metadata, not shown) that names it:
#
#   :man-section: 3
#   :man-names: svmbatch_reg_create svmbatch_reg_destroy
#   :man-summary: what NAME says after the dash
#
# A page with several names is written once per name, as liburing's
# aliases are.  cli.rst is svmbatch(1).  Both the HTML and the man build
# read these sources: there is no second copy to keep in step.
_here = pathlib.Path(__file__).resolve().parent
man_pages = [('cli', 'svmbatch',
              'inspect the svmbatch module, benchmark it, run its selftests',
              [author], 1)]
for _rst in sorted((_here / 'man').glob('*.rst')):
    _fields = dict(re.findall(r'^:man-([a-z]+): *(.*)$',
                              _rst.read_text(encoding='utf-8'), re.M))
    if not _fields:
        continue
    for _name in _fields['names'].split():
        man_pages.append(('man/' + _rst.stem, _name, _fields['summary'],
                          [author], int(_fields['section'])))
man_show_urls = False
man_make_section_directory = True

# The man build reads only the pages it writes (uapi.rst includes a file
# that `make htmldocs` generates; the rest is not in any manual page).
if tags.has('man'):  # noqa: F821 (Sphinx defines tags)
    root_doc = 'man/index'
    _keep = {doc for doc, *_ in man_pages} | {root_doc}
    exclude_patterns = [str(p.relative_to(_here)) for p in _here.rglob('*.rst')
                        if str(p.relative_to(_here))[:-4] not in _keep]


def _man_root(app, docname, source):
    # The man build's root also holds svmbatch(1), which the HTML build
    # reaches from index.rst.
    if tags.has('man') and docname == 'man/index':  # noqa: F821
        source[0] += '\n.. toctree::\n   :hidden:\n\n   /cli\n'


# The figure roles (bench/check-results.py checks every one):
#
#   :result:`34.2 GB/s <loaders-h100-2026-11-26.json:cells[cell=tmpfs-single].summary.svmbatch_steady_GBps>`
#       a measured figure and the result file and member it is;
#   :given:`4 GiB`
#       a figure that is not a measurement (a size, a bar, a default).
#
# Both show TEXT as plain text; a result's reference is the HTML title
# (a tooltip) of the figure, and the manual pages show TEXT alone.
def _figure_role(name, rawtext, text, lineno, inliner, options=None,
                 content=None):
    from docutils import nodes
    from docutils.utils import unescape
    from sphinx.util.nodes import split_explicit_title
    has_ref, shown, ref = split_explicit_title(unescape(text))
    if name == 'result' and not has_ref:
        msg = inliner.reporter.error(
            f':result: needs "TEXT <FILE:MEMBER>", not {text!r}', line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    node = nodes.inline(rawtext, shown, classes=['figure-' + name])
    if has_ref:
        node['reftitle'] = ref
    return [node], []


def _figure_title(app, doctree, docname):
    # docutils' HTML writer has no title for an inline: write the span.
    from docutils import nodes
    if app.builder.format != 'html':
        return
    from html import escape
    for node in list(doctree.findall(nodes.inline)):
        ref = node.get('reftitle')
        if ref:
            span = nodes.raw(
                '', f'<span class="figure-result" title="{escape(ref)}">'
                f'{escape(node.astext())}</span>', format='html')
            node.replace_self(span)
            span['classes'] = []  # replace_self copied the inline's


def setup(app):
    app.connect('source-read', _man_root)
    app.add_role('result', _figure_role)
    app.add_role('given', _figure_role)
    app.connect('doctree-resolved', _figure_title)
