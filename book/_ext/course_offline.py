"""Sphinx extension: make the Jupyter Book website work with no network at all.

What it does, and why:

* **MathJax 2.7 served locally.** ``mathjax_path`` in ``book/_config.yml`` points at
  ``_static/mathjax/MathJax.js``; at the end of an HTML build this extension copies the small part
  of MathJax 2.7 that the pages use (TeX input, HTML-CSS output, STIX-Web woff fonts, English
  strings) from the ``jupyter_server_mathjax`` package into ``<outdir>/_static/mathjax/``.
* **MathJax 2, not 3.** myst-parser writes its "only typeset ``.math`` nodes" setting into
  ``mathjax3_config``, which Sphinx would emit as ``window.MathJax = {...}`` for MathJax 3. With
  MathJax 2 that setting lives in ``mathjax2_config['tex2jax']`` (set in ``_config.yml``), so the
  v3 block is dropped here.
* **No thebe.** Jupyter Book always loads ``sphinx_thebe``, which puts an ``unpkg.com`` URL and a
  binder configuration on every page. Launch buttons are off in this course, so its handlers and
  assets are removed.
* **No favicon request.** Without ``html_favicon`` every page gets an empty ``data:`` icon, so
  browsers do not ask the server for ``/favicon.ico``.
* **A check.** After the build every generated HTML page and every stylesheet in ``_static`` is
  scanned; anything that would make the browser fetch from ``http(s)://`` or ``//host`` (scripts,
  stylesheets, fonts, images, iframes, CSS ``url()``/``@import``) is reported as a warning of type
  ``course_offline`` -- an error under ``make book-strict`` (``-W``). Plain hyperlinks
  (``<a href>``) are fine: following one is the reader's choice.
"""

from __future__ import annotations

import html.parser
import importlib.util
import re
import shutil
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

__version__ = "1.0"

# Parts of jupyter_server_mathjax/static that the TeX-AMS-MML_HTMLorMML-full config needs.
# (That package ships MathJax 2.7.9 with STIX-Web fonts only; HTML-CSS output.)
MATHJAX_PARTS: tuple[str, ...] = (
    "LICENSE",
    "MathJax.js",
    "config/TeX-AMS-MML_HTMLorMML-full.js",
    "jax/element",
    "jax/input",
    "jax/output/HTML-CSS",
    "extensions/*.js",
    "extensions/TeX",
    "extensions/HTML-CSS",
    "extensions/MathML",
    "fonts/HTML-CSS/STIX-Web/woff",
    "localization/en",
)
MATHJAX_DIR = "mathjax"  # under _static/
_EMPTY_ICON = '\n    <link rel="icon" href="data:," />'
_STAMP = ".course_offline_stamp"

_EXTERNAL = re.compile(r"^\s*(?:https?:)?//", re.IGNORECASE)
_CSS_URL = re.compile(r"""url\(\s*['"]?\s*((?:https?:)?//[^)'"\s]+)""", re.IGNORECASE)
_CSS_IMPORT = re.compile(r"""@import\s+['"]((?:https?:)?//[^'"]+)""", re.IGNORECASE)
_INLINE_SCRIPT_URL = re.compile(r"""['"`]((?:https?:)?//[^'"`\s]+)""", re.IGNORECASE)

# tag -> attributes whose URL the browser fetches by itself
_FETCHING_ATTRS: dict[str, tuple[str, ...]] = {
    "script": ("src",),
    "link": ("href",),
    "img": ("src", "srcset"),
    "source": ("src", "srcset"),
    "iframe": ("src",),
    "frame": ("src",),
    "embed": ("src",),
    "object": ("data",),
    "video": ("src", "poster"),
    "audio": ("src",),
    "track": ("src",),
    "input": ("src",),
    "image": ("href", "xlink:href"),
    "use": ("href", "xlink:href"),
}
# <link rel=...> values that do not fetch anything
_NON_FETCHING_LINK_RELS = {"canonical", "alternate", "author", "license", "help", "search",
                           "next", "prev", "index", "bookmark", "external", "me", "nofollow"}


def mathjax_source() -> Path:
    """Folder with the MathJax 2.7 files shipped by ``jupyter_server_mathjax``."""
    spec = importlib.util.find_spec("jupyter_server_mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "course_offline: the `jupyter-server-mathjax` package is not installed; "
            "it provides the local MathJax 2.7 copy (pip install -r requirements.txt)."
        )
    src = Path(list(spec.submodule_search_locations)[0]) / "static"
    if not (src / "MathJax.js").is_file():
        raise RuntimeError(f"course_offline: no MathJax.js in {src}")
    return src


def copy_mathjax(static_dir: Path) -> Path:
    """Copy the needed MathJax parts into ``static_dir/mathjax``; skip when already up to date."""
    src = mathjax_source()
    dest = static_dir / MATHJAX_DIR
    stamp_text = f"{__version__} {src} {(src / 'MathJax.js').stat().st_mtime_ns} {MATHJAX_PARTS}"
    stamp = dest / _STAMP
    if stamp.is_file() and stamp.read_text() == stamp_text and (dest / "MathJax.js").is_file():
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    for part in MATHJAX_PARTS:
        matches = sorted(src.glob(part)) if "*" in part else [src / part]
        for path in matches:
            if not path.exists():
                raise RuntimeError(f"course_offline: MathJax part {part!r} missing in {src}")
            target = dest / path.relative_to(src)
            if path.is_dir():
                shutil.copytree(path, target, dirs_exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
    stamp.write_text(stamp_text)
    return dest


class _ResourceScanner(html.parser.HTMLParser):
    """Collect URLs in one HTML page that the browser would fetch without a click."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.external: list[str] = []
        self._in_script: dict[str, str] | None = None
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        amap = {k.lower(): (v or "") for k, v in attrs}
        if tag == "link":
            rels = set(amap.get("rel", "").lower().split())
            if rels and rels <= _NON_FETCHING_LINK_RELS:
                return
        for attr in _FETCHING_ATTRS.get(tag, ()):
            value = amap.get(attr, "")
            for candidate in value.split(",") if attr == "srcset" else [value]:
                if _EXTERNAL.match(candidate):
                    self.external.append(f"<{tag} {attr}={candidate.strip()!r}>")
        style = amap.get("style", "")
        self.external += [f"style url {u}" for u in _CSS_URL.findall(style)]
        if tag == "script" and not amap.get("src"):
            self._in_script = amap
        if tag == "style":
            self._in_style = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = None
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.external += [f"<style> {u}" for u in _CSS_URL.findall(data) + _CSS_IMPORT.findall(data)]
        elif self._in_script is not None:
            kind = self._in_script.get("type", "text/javascript").lower()
            if "json" in kind:  # data islands (widget state, configs) are not executed
                return
            self.external += [f"inline <script> {u}" for u in _INLINE_SCRIPT_URL.findall(data)]


# Every URL the scanner flags holds "//" (http://, https:// or scheme-relative), written as it is or
# with its slashes as character references in an attribute; a link (<a href>) fetches nothing.
_ANCHOR_TAG = re.compile(r"<a\s[^>]*>", re.IGNORECASE)
_ENCODED_SLASH = re.compile(r"&(?:#0*47|#x0*2f|sol);", re.IGNORECASE)


def external_resources_in_html(text: str) -> list[str]:
    """URLs in an HTML document that would be fetched from the network on page load. A page with
    no "//" outside its links' tags (three pages in four of the built book) has none and is not
    parsed: parsing every page took 1.75 CPU-s of the book build's 37.7, now 0.39."""
    if "//" not in _ANCHOR_TAG.sub("", text) and not _ENCODED_SLASH.search(text):
        return []
    scanner = _ResourceScanner()
    scanner.feed(text)
    scanner.close()
    return scanner.external


def external_resources_in_css(text: str) -> list[str]:
    """``url(http...)`` and ``@import "http..."`` in a stylesheet."""
    return _CSS_URL.findall(text) + _CSS_IMPORT.findall(text)


def find_external_resources(outdir: Path) -> dict[str, list[str]]:
    """Map each generated file (relative path) to the external URLs it would load."""
    found: dict[str, list[str]] = {}
    for page in sorted(outdir.rglob("*.html")):
        rel = page.relative_to(outdir).as_posix()
        if rel.startswith(("_static/", "_sources/")):
            continue
        hits = external_resources_in_html(page.read_text(encoding="utf-8", errors="replace"))
        if hits:
            found[rel] = hits
    for sheet in sorted((outdir / "_static").rglob("*.css")):
        hits = external_resources_in_css(sheet.read_text(encoding="utf-8", errors="replace"))
        if hits:
            found[sheet.relative_to(outdir).as_posix()] = hits
    return found


# --------------------------------------------------------------------------------- Sphinx hooks
def _is_html(app: Sphinx) -> bool:
    return getattr(app.builder, "format", "") == "html"


def _uses_mathjax2(app: Sphinx) -> bool:
    return "MathJax.js" in (app.config.mathjax_path or "")


def _on_builder_inited(app: Sphinx) -> None:
    # Runs after myst-parser's override_mathjax (priority 500): drop its MathJax-3 block.
    if _uses_mathjax2(app):
        app.config.mathjax3_config = None
    # sphinx_thebe is always loaded by Jupyter Book; launch buttons are off here.
    for event in ("env-before-read-docs", "doctree-resolved"):
        for listener in list(app.events.listeners.get(event, [])):
            if getattr(listener.handler, "__module__", "").startswith("sphinx_thebe"):
                app.disconnect(listener.id)


def _is_unwanted_asset(asset: Any) -> bool:
    name = str(getattr(asset, "filename", "") or "")
    body = str(getattr(asset, "attributes", {}).get("body", ""))
    return "sphinx-thebe" in name or "THEBE_JS_URL" in body


def _on_html_page_context(app: Sphinx, pagename: str, templatename: str,
                          context: dict[str, Any], doctree: Any) -> None:
    for key in ("script_files", "css_files"):
        files = context.get(key)
        if isinstance(files, list):
            files[:] = [f for f in files if not _is_unwanted_asset(f)]
    if not app.config.html_favicon:
        # Without an icon the browser asks the server for /favicon.ico (a 404 in the log).
        context["metatags"] = context.get("metatags", "") + _EMPTY_ICON


def _on_build_finished(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or not _is_html(app):
        return
    outdir = Path(app.outdir)
    if _uses_mathjax2(app):
        dest = copy_mathjax(outdir / "_static")
        logger.info("course_offline: MathJax 2.7 copied to %s", dest.relative_to(outdir))
    for rel, urls in find_external_resources(outdir).items():
        for url in urls:
            logger.warning("%s would load %s from the network (the website must work offline)",
                           rel, url, type="course_offline", subtype="external")


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", _on_builder_inited, priority=900)
    app.connect("html-page-context", _on_html_page_context, priority=900)
    app.connect("build-finished", _on_build_finished, priority=900)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
