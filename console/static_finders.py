"""Static files shipped inside installed Python packages, served and collected like the site's
own: Plotly's bundled plotly.min.js (from the pinned `plotly` package, never a CDN, never
committed) as vendor/plotly.min.js."""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import Error
from django.core.files.storage import FileSystemStorage

# static path -> (package, file inside the package)
PACKAGED = {"vendor/plotly.min.js": ("plotly", "package_data/plotly.min.js")}


def packaged_file(package: str, inner: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / inner
    return path if path.is_file() else None


class PackagedFilesFinder(BaseFinder):
    def check(self, **kwargs):
        return [
            Error(
                f"{static} comes from the {package} package, which is not installed.",
                hint="Install requirements.txt into the virtualenv.",
                id="console.E010",
            )
            for static, (package, inner) in PACKAGED.items()
            if packaged_file(package, inner) is None
        ]

    def find(self, path, find_all=False, **kwargs):
        found = PACKAGED.get(path)
        file = packaged_file(*found) if found else None
        if file is None:
            return [] if find_all else None
        return [str(file)] if find_all else str(file)

    def list(self, ignore_patterns):
        for static, (package, inner) in PACKAGED.items():
            file = packaged_file(package, inner)
            if file is None:
                continue
            folder, _, name = static.rpartition("/")
            storage = FileSystemStorage(location=str(file.parent))
            storage.prefix = folder
            # The storage lists the package's folder; only the one file is this static path.
            if file.name == name:
                yield name, storage


# Plotly's bundle injects the CSS of its map library as a <style> element when it loads, unless
# an element with that style's id is in the page already; the Content-Security-Policy refuses
# inline styles, so the page carries an empty element of that id (the id changes with Plotly's
# version, hence read from the file itself).
_STYLE_ID = re.compile(
    r'getElementById\("([0-9a-f]{32,64})"\)\)\{var \w+=document\.createElement\("style"\)'
)


@functools.cache
def plotly_style_ids() -> tuple[str, ...]:
    file = packaged_file(*PACKAGED["vendor/plotly.min.js"])
    if file is None:
        return ()
    return tuple(
        dict.fromkeys(_STYLE_ID.findall(file.read_text(encoding="utf-8", errors="replace")))
    )
