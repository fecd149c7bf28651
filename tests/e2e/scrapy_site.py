"""The site the Scrapy tests crawl: six news stories written for these tests, each on its
own page in one site's chrome, and the copies a crawler meets on real sites.

- ``/`` links to the six stories, ``/news/1`` .. ``/news/6``;
- the story of ``/news/1`` again under an archive path (the same page, another URL);
- ``/news/2/print``, its print version (the article alone, no chrome);
- ``/partners/metro/3``, story 3 syndicated to a partner (another site's chrome);
- ``/mirror/4``, a mirror of story 4 (a third site's chrome) linking to two pages found
  only through it, ``/mirror/4/a`` and ``/mirror/4/b``, stories of their own.

Each copy is linked from its original only, so the original is always crawled first.
The expectations (which page repeats which) come from how the site is built, not from
anything neardup answers.
"""

from __future__ import annotations

import html
import random

from devkit.crawl import Page
from devkit.pages import SITES, site_page, teasers_from


def _unwrap(text: str) -> str:
    """Paragraphs wrapped to this file's width, a blank line between them: one line each."""
    return "\n".join(" ".join(block.split()) for block in text.strip().split("\n\n"))


STORIES = {
    1: (
        "Harbour bridge reopens after two years of repairs",
        _unwrap(
            """
The Harbour Street bridge reopened to traffic on Saturday morning, two years after engineers
closed it when a routine inspection found corrosion in three of its steel bearings. A small
crowd of residents, many of them carrying coffee from the bakery on the north bank, walked
across the deck before the first buses were allowed through at nine o'clock.

The repairs cost the city 41 million dollars, eleven million more than the council approved
in its first budget. Officials blamed the difference on the price of structural steel, which
rose sharply during the first year of work, and on a winter flood that swept away part of
the temporary scaffolding under the eastern span.

Mayor Elena Brandt said the closure had been hard on the shops and restaurants of the old
quarter, which lost most of their passing trade when drivers were sent on a detour through
the industrial estate. She announced a grant of five thousand dollars for each business on
Harbour Street that could show a fall in takings during the closure.

Engineers replaced all twelve bearings rather than the three that had failed, and the deck
now carries sensors that report strain and temperature to the city's maintenance office
every minute. The chief engineer, Samuel Okafor, said the bridge should need no major work
for at least forty years if it is painted on schedule.

Cyclists were the loudest group at the ceremony. The new deck has a protected lane on each
side, separated from traffic by a low concrete kerb, something campaigners had demanded for
a decade. Several riders rang their bells as the ribbon was cut.

Not everyone was pleased. A group of residents from the south bank complained that the work
had started without a proper consultation and that heavy lorries would now return to their
narrow streets. The council said it would review the weight limit in the spring.
"""
        ),
    ),
    2: (
        "Volunteers count a record number of nesting turtles",
        _unwrap(
            """
Volunteers on the southern beaches counted more than eighteen hundred loggerhead turtle
nests this summer, the highest number since records began in 1989, the regional wildlife
trust said on Tuesday.

The count is carried out every morning from May to August by about two hundred volunteers
who walk the sand at dawn looking for the tracks that female turtles leave when they crawl
ashore at night to lay their eggs. Each nest is marked with wooden stakes and a numbered tag
so that it can be watched until the hatchlings emerge.

Biologists at the trust cautioned against reading too much into a single good year.
Loggerheads do not nest every season, and a female that laid eggs this year may not return
for two or three years. The long-term trend, they said, is more important than any one
summer, although it has also been rising slowly for fifteen years.

The trust credits part of the recovery to rules that require fishing boats to fit escape
hatches to their nets, and to the darkening of beachfront lights. Hatchlings find the sea by
moving towards the brightest horizon, and street lamps and hotel signs used to lure
thousands of them inland, where they died on roads and in car parks.

Hotels along the coast now switch off or shield their outdoor lights between ten at night
and dawn during the nesting season. Most owners accepted the rules after some early
resistance, according to the trust, and several now advertise turtle walks to their guests.

The hatching season runs until October. The trust asked visitors to keep away from marked
nests, to fill in holes dug in the sand before leaving the beach, and never to shine a torch
on a turtle that is laying her eggs.
"""
        ),
    ),
    3: (
        "Regional orchestra finds a new home in an old tram depot",
        _unwrap(
            """
The Valley Symphony Orchestra will move into a converted tram depot on the edge of the city
centre next autumn, ending a search for a permanent home that has lasted almost twenty
years.

The orchestra has performed in school halls, churches and a conference centre since its old
concert hall was demolished to make way for a shopping arcade. Musicians have complained for
years about poor acoustics, cramped rehearsal rooms and the cost of moving instruments from
one venue to another every week.

The depot, built in 1911, housed the city's trams until the network closed in the late
fifties and has been used since then as a warehouse and a car park. Its long brick hall,
with a roof of iron trusses and glass, will be divided into an auditorium of nine hundred
seats, a smaller room for chamber music and a rehearsal studio.

The architects worked with an acoustic engineer from Copenhagen who tested the hall by
firing a starting pistol and recording how the sound decayed. She said the brick walls gave
the room a warm reverberation that concert halls built from concrete often lack, and that
wooden panels would be added to control the echo.

The conversion will cost about thirty million dollars. Half comes from the regional
government, a quarter from a lottery fund and the rest from private donors, including a
retired surgeon who gave four million dollars on condition that the orchestra offers free
concerts to schools every month.

The music director, Tomasz Wieczorek, said the move would allow the orchestra to plan full
seasons for the first time. He hopes to double the number of concerts and to start a youth
orchestra that rehearses in the depot on Saturday mornings.
"""
        ),
    ),
    4: (
        "Farmers test drought-tolerant wheat on the high plateau",
        _unwrap(
            """
Farmers on the high plateau have begun the third season of a trial of drought-tolerant
wheat, after two dry years in which yields of the usual varieties fell by almost a third.

The trial, run by the agricultural college with forty farms, compares four new varieties
bred to put down deeper roots and to close the pores of their leaves earlier in the day,
when the sun is strongest. Each farm plants strips of the new wheat beside its usual crop so
that the two can be compared on the same soil and under the same weather.

Results so far have been mixed. In the driest fields the new varieties yielded about fifteen
percent more grain than the old ones, but in wetter years they did slightly worse, because
the habits that help them survive a drought also slow their growth when water is plentiful.

Millers have raised another concern. Two of the varieties produce flour with less protein,
which makes it harder to bake bread that rises well. The college says the protein content
can be improved with careful use of fertiliser, but some farmers worry that the extra cost
would wipe out the gain.

Rosa Delgado, who farms six hundred hectares near the reservoir, said she would keep
planting the new wheat on her poorest fields even if it was not perfect. Her grandfather,
she said, used to leave those fields fallow every other year, and she cannot afford to do
that.

The college will publish its full results next spring. It has also started crossing the most
promising variety with an old local wheat that farmers used before the war, hoping to
combine its deep roots with the baking quality that millers want.
"""
        ),
    ),
    5: (
        "Library lends tools as well as books",
        _unwrap(
            """
The public library in the Eastfield district has started lending drills, ladders, sewing
machines and garden tools, alongside its books and films, in a scheme that librarians say
has brought hundreds of new members through its doors.

The tool library occupies a former storage room at the back of the building. Its shelves
hold about four hundred items, most of them donated by residents who were clearing out their
garages or moving to smaller homes. Members can borrow up to three tools at a time for a
week, using the same card they use for books.

The idea came from a librarian, Grace Mwangi, who noticed that many people asking for books
about home repairs did not own the tools the books described. She said most households use a
power drill for a few minutes a year, so it makes little sense for every family on a street
to buy one.

The most popular items are the carpet cleaner, the pressure washer and a set of ladders long
enough to reach the gutters of the district's terraced houses. The waiting list for the
carpet cleaner is usually three weeks long, and the library is raising money to buy a second
one.

Volunteers repair broken tools on Thursday evenings and run workshops for beginners,
covering subjects such as fixing a dripping tap, hanging shelves safely and sharpening
garden shears. The workshops are free and often full.

Losses have been smaller than expected. Only six tools have failed to come back in the first
year, and the library has decided not to charge deposits, saying that trust is part of the
point. Other branches in the city are now planning tool libraries of their own.
"""
        ),
    ),
    6: (
        "Night trains return to the northern line",
        _unwrap(
            """
Sleeper trains will run again between the capital and the northern ports from December,
eleven years after the last service was cancelled because of falling demand and the rising
cost of maintaining its old carriages.

The new service will leave the capital at half past nine every evening and arrive at the
coast shortly after seven the next morning, with stops at four cities on the way. Each train
will carry private cabins with beds and washbasins, cheaper compartments with six
couchettes, and a carriage of reclining seats for travellers on a tight budget.

The rail operator said bookings opened last week and that the first month was already more
than half sold. Many of the early buyers were families planning holidays and business
travellers who would rather sleep on a train than take an early flight and pay for a hotel.

The carriages were bought second hand from an operator in the south and refurbished at the
railway works in the old junction town, where two hundred people were hired for the job. The
works had been close to closing before the contract was signed.

Environmental groups welcomed the return of the trains. A passenger on the sleeper produces
a small fraction of the carbon dioxide of a passenger on the same journey by air, according
to figures from the transport ministry, and campaigners hope that other night routes will
follow.

The operator warned that the service must pay its way. The ministry has promised a subsidy
for the first three years only, after which the trains will continue only if enough seats
are sold. Fares start at forty dollars for a reclining seat and rise to two hundred for a
private cabin.
"""
        ),
    ),
}
# Pages found only through the mirror: stories of their own, never crawled when the
# middleware does not follow the mirror's links.
MIRROR_ONLY = {
    "a": (
        "Bakers revive a forgotten rye loaf",
        _unwrap(
            """
A group of bakers in the hill villages has revived a dense rye loaf that was last sold
commercially in the nineteen sixties, working from a recipe found in a notebook in a
farmhouse attic. The loaf is baked slowly in wood-fired ovens and keeps for two weeks.
Demand has surprised the bakers, who now sell out by mid morning on market days and are
training two apprentices to keep up.
"""
        ),
    ),
    "b": (
        "Chess club for pensioners wins the city league",
        _unwrap(
            """
A chess club that meets in a community centre every Wednesday afternoon has won the city
league for the first time, beating teams of university students and office workers. Its
players are all over seventy, and its captain, a retired postman, learned the game from a
book during a long stay in hospital. The club has more than doubled in size since the win
and now runs lessons for grandchildren during the school holidays.
"""
        ),
    ),
}

ARCHIVE = "/archive/2024/05/harbour-bridge-reopens"
PRINT = "/news/2/print"
SYNDICATED = "/partners/metro/3"
MIRROR = "/mirror/4"
# Each copy and the page it repeats.
COPIES = {ARCHIVE: "/news/1", PRINT: "/news/2", SYNDICATED: "/news/3", MIRROR: "/news/4"}
ORIGINALS = [f"/news/{number}" for number in STORIES]
MIRROR_LINKS = [f"{MIRROR}/{key}" for key in MIRROR_ONLY]
# The pages the spider follows links to (the chrome's own links lead elsewhere).
FOLLOW = ("/news/", "/archive/", "/partners/", "/mirror/")


def _with_links(page: str, links: dict[str, str]) -> str:
    """The page with a "read more" list after its article."""
    items = "".join(
        f'<li><a href="{href}">{html.escape(text)}</a></li>' for href, text in links.items()
    )
    return page.replace('<div class="tags">', f'<ul class="more">{items}</ul><div class="tags">', 1)


def _print_page(title: str, article: str) -> str:
    body = "".join(f"<p>{html.escape(line)}</p>" for line in article.splitlines())
    return (
        f"<!DOCTYPE html><html><head><title>{html.escape(title)} (print)</title></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def site() -> dict[str, Page]:
    """Every page of the site by path."""
    articles = [article for _, article in STORIES.values()]
    teasers = teasers_from(articles, 14, random.Random(7))
    ledger, metro, review = SITES
    pages: dict[str, str] = {}
    home = "".join(
        f'<li><a href="/news/{number}">{html.escape(title)}</a></li>'
        for number, (title, _) in STORIES.items()
    )
    pages["/"] = (
        "<!DOCTYPE html><html><head><title>The Morning Ledger</title></head><body>"
        "<h2>Today's stories</h2><p>Welcome to the Morning Ledger, the independent "
        "newspaper of the valley since 1921, with local reporting from our own newsroom "
        f"and correspondents in every district.</p><ul>{home}</ul></body></html>"
    )
    for number, (title, article) in STORIES.items():
        pages[f"/news/{number}"] = site_page(ledger, title, article, teasers)
    pages["/news/1"] = _with_links(pages["/news/1"], {ARCHIVE: "From the archive"})
    pages[ARCHIVE] = site_page(ledger, STORIES[1][0], STORIES[1][1], teasers)
    pages["/news/2"] = _with_links(pages["/news/2"], {PRINT: "Print this story"})
    pages[PRINT] = _print_page(*STORIES[2])
    pages["/news/3"] = _with_links(pages["/news/3"], {SYNDICATED: "Also at our partner"})
    pages[SYNDICATED] = site_page(metro, STORIES[3][0], STORIES[3][1], teasers)
    pages["/news/4"] = _with_links(pages["/news/4"], {MIRROR: "Mirror"})
    mirror = site_page(review, STORIES[4][0], STORIES[4][1], teasers)
    pages[MIRROR] = _with_links(mirror, {link: MIRROR_ONLY[link[-1]][0] for link in MIRROR_LINKS})
    for key, (title, article) in MIRROR_ONLY.items():
        pages[f"{MIRROR}/{key}"] = site_page(review, title, article, teasers)
    return {path: Page(text.encode()) for path, text in pages.items()}
