"""neardup in a Scrapy project: an item pipeline that sends each item to a collection and
drops near-duplicates, and a spider middleware that does not follow the links of a page
that repeats one crawled before it. Installed with the ``scrapy`` extra.

    # settings.py
    ITEM_PIPELINES = {"neardup_client.scrapy.NeardupPipeline": 300}
    SPIDER_MIDDLEWARES = {"neardup_client.scrapy.NeardupSpiderMiddleware": 50}
    NEARDUP_URL = "http://127.0.0.1:8000"
    NEARDUP_COLLECTION = "crawl"

The settings (``NEARDUP_*``) are NeardupSettings'; the stats (``neardup/new``,
``neardup/duplicate``, ``neardup/contained``, ``neardup/error``...) count each document
once, a page and its item being one.
"""

from neardup_client.scrapy._checker import Answer, Checker
from neardup_client.scrapy._middleware import NeardupSpiderMiddleware
from neardup_client.scrapy._pipeline import NeardupPipeline
from neardup_client.scrapy._settings import NeardupSettings

__all__ = ["Answer", "Checker", "NeardupPipeline", "NeardupSettings", "NeardupSpiderMiddleware"]
