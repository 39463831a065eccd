"""The labs' and the worked answers' pages in the browser: test_site.py's two per-page checks (works
offline, reads well at a desktop and a phone width) on notebooks/ and solutions/. A file of their own
so that pytest-xdist, which gives each file to one worker, runs them beside test_site.py instead of
after it; the pages are chosen in conftest.SITE_PAGE_FILES."""
from __future__ import annotations

from test_site import browser, page_visits, test_page_reads_well, test_page_works_offline  # noqa: F401
