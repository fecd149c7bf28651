// neardup's page: plain JavaScript against the HTTP contract (v1), no build step.
// Everything from the service or the user is put in the page as text (textContent),
// never as markup.
'use strict';

(() => {
  const KEY_STORAGE = 'neardup.apiKey';
  const COLLECTION_STORAGE = 'neardup.collection';
  const $ = (id) => document.getElementById(id);

  const state = {
    collection: null, // the selected collection's description (GET /v1/collections/{name})
    text: '', // the text the matches shown were found for
    matchesIn: '', // and the collection they were found in
    documents: new Map(), // id -> Promise of the stored document, for the matches shown
    readyTimer: null,
    loads: 0, // loadCollections calls: only the latest one's answer is shown
  };

  // ------------------------------------------------------------------ the API

  class ApiError extends Error {
    constructor(status, code, message, retryAfter) {
      super(message);
      this.status = status;
      this.code = code;
      this.retryAfter = retryAfter;
    }
  }

  function apiKey() {
    return sessionStorage.getItem(KEY_STORAGE) || '';
  }

  // One request; the answer's JSON (or text), or an ApiError with the contract's code
  // and message. Paths are relative, so the page works behind a prefix too.
  async function api(method, path, body, accept = 'application/json') {
    const headers = { Accept: accept };
    const key = apiKey();
    if (key) headers.Authorization = `Bearer ${key}`;
    const init = { method, headers };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      throw new ApiError(0, 'network_error', `the service cannot be reached (${error.message})`);
    }
    if (response.status === 204) return null;
    const isJson = (response.headers.get('Content-Type') || '').includes('json');
    const payload = isJson ? await response.json().catch(() => null) : await response.text();
    if (response.ok) return payload;
    const detail = payload && typeof payload === 'object' ? payload.error : null;
    const retryAfter = Number.parseFloat(response.headers.get('Retry-After') || '');
    const error = new ApiError(
      response.status,
      detail ? detail.code : `http_${response.status}`,
      detail ? detail.message : String(payload || response.statusText).slice(0, 300),
      Number.isFinite(retryAfter) ? retryAfter : null,
    );
    // An answer to a key the user has replaced since (a slow request) asks for nothing.
    if (response.status === 401 && key === apiKey()) askForKey();
    if (response.status === 503) watchReadiness(retryAfter);
    throw error;
  }

  const collectionPath = (name) => `v1/collections/${encodeURIComponent(name)}`;
  const documentPath = (name, id) => `${collectionPath(name)}/documents/${encodeURIComponent(id)}`;

  // ------------------------------------------------------------------ messages

  function showError(error, where = $('error')) {
    where.replaceChildren();
    const code = document.createElement('span');
    code.className = 'code';
    code.textContent = error.status ? `${error.status} ${error.code}` : error.code || 'error';
    where.append(code, `: ${error.message}`);
    if (error.retryAfter) where.append(` (the service asks to retry in ${error.retryAfter} s)`);
    where.hidden = false;
  }

  function clearError() {
    $('error').hidden = true;
    $('error').replaceChildren();
  }

  function localError(code, message) {
    return new ApiError(0, code, message, null);
  }

  function setStatus(text, kind) {
    const status = $('status');
    status.textContent = text;
    status.className = `status ${kind}`;
  }

  function element(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function fillPairs(list, pairs) {
    list.replaceChildren();
    for (const [name, value] of pairs) list.append(element('dt', name), element('dd', value));
  }

  // ------------------------------------------------------------------ readiness and keys

  async function watchReadiness(after) {
    if (state.readyTimer !== null) return;
    let ready = false;
    try {
      const response = await fetch('readyz', { headers: { Accept: 'application/json' } });
      ready = response.ok;
      if (!ready) {
        const body = await response.json().catch(() => null);
        const seconds = Number.parseFloat(response.headers.get('Retry-After') || '') || after || 1;
        const message = body && body.error ? body.error.message : 'not ready';
        setStatus(`starting: ${message}`, 'waiting');
        state.readyTimer = setTimeout(() => {
          state.readyTimer = null;
          watchReadiness(seconds);
        }, seconds * 1000);
        return;
      }
    } catch (error) {
      setStatus('unreachable', 'down');
      state.readyTimer = setTimeout(() => {
        state.readyTimer = null;
        watchReadiness(after);
      }, 2000);
      return;
    }
    setStatus('ready', 'ready');
    await loadCollections();
  }

  function askForKey() {
    $('key-panel').hidden = false;
    $('key-prompt').hidden = false;
    setStatus('API key needed', 'waiting');
    if (!apiKey()) $('api-key').focus();
  }

  async function useKey(event) {
    event.preventDefault();
    const key = $('api-key').value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY_STORAGE, key);
    $('api-key').value = '';
    clearError();
    await loadCollections();
  }

  function forgetKey() {
    sessionStorage.removeItem(KEY_STORAGE);
    $('api-key').value = '';
    loadCollections();
  }

  // ------------------------------------------------------------------ collections

  async function loadCollections() {
    state.loads += 1;
    const load = state.loads;
    let listing;
    try {
      listing = await api('GET', 'v1/collections');
    } catch (error) {
      if (load === state.loads) showError(error);
      return false;
    }
    if (load !== state.loads) return false;
    clearError();
    // Answered: the key (or no key) is good.
    $('key-prompt').hidden = true;
    setStatus('ready', 'ready');
    const select = $('collection');
    const wanted = select.value || sessionStorage.getItem(COLLECTION_STORAGE) || 'default';
    select.replaceChildren();
    for (const collection of listing.collections) {
      const option = element('option', collection.name);
      option.value = collection.name;
      select.append(option);
    }
    const names = listing.collections.map((c) => c.name);
    select.value = names.includes(wanted) ? wanted : names[0] || '';
    await loadCollection();
    return true;
  }

  function settingsPairs(settings, prefix = '') {
    const pairs = [];
    for (const [key, value] of Object.entries(settings)) {
      if (value && typeof value === 'object') pairs.push(...settingsPairs(value, `${prefix}${key}.`));
      else pairs.push([`${prefix}${key}`, value === null ? 'none' : String(value)]);
    }
    return pairs;
  }

  function bytes(count) {
    if (count < 1024) return `${count} B`;
    const units = ['KiB', 'MiB', 'GiB', 'TiB'];
    let value = count;
    let unit = -1;
    do {
      value /= 1024;
      unit += 1;
    } while (value >= 1024 && unit < units.length - 1);
    return `${value.toFixed(1)} ${units[unit]}`;
  }

  async function loadCollection() {
    const name = $('collection').value;
    if (!name) return;
    sessionStorage.setItem(COLLECTION_STORAGE, name);
    let collection;
    try {
      collection = await api('GET', collectionPath(name));
    } catch (error) {
      showError(error);
      return;
    }
    state.collection = collection;
    fillPairs($('settings'), settingsPairs(collection.settings));
    const { documents, duplicates, merges, index_bytes: indexBytes, ...more } = collection.stats;
    fillPairs($('stats'), [
      ['documents', documents.toLocaleString('en')],
      ['near-duplicates', duplicates.toLocaleString('en')],
      ['merges', merges.toLocaleString('en')],
      ['index memory', bytes(indexBytes)],
      // Stats of newer services (evicted, expiring, oldest_timestamp...) as they come.
      ...Object.entries(more).map(([key, value]) => [
        key.replaceAll('_', ' '),
        typeof value === 'number' ? value.toLocaleString('en') : String(value ?? '—'),
      ]),
    ]);
    await loadHealth(name);
  }

  // The Prometheus text format: name{label="value",...} value
  function parseMetrics(text) {
    const samples = [];
    for (const line of text.split('\n')) {
      if (!line || line.startsWith('#')) continue;
      const found = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/);
      if (!found) continue;
      const labels = {};
      for (const label of (found[2] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[label[1]] = label[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
      }
      samples.push({ name: found[1], labels, value: Number(found[3]) });
    }
    return samples;
  }

  async function loadHealth(name) {
    const body = $('health').tBodies[0];
    body.replaceChildren();
    let text;
    try {
      text = await api('GET', 'metrics', undefined, 'text/plain');
    } catch (error) {
      $('health-note').textContent = `/metrics: ${error.status} ${error.code}: ${error.message}`;
      return;
    }
    const mine = parseMetrics(text).filter((s) => s.labels.collection === name);
    const single = (metric) => {
      const sample = mine.find((s) => s.name === metric && !('index' in s.labels));
      return sample ? sample.value : 0;
    };
    const indexes = new Map();
    for (const sample of mine) {
      if (!('index' in sample.labels)) continue;
      const row = indexes.get(sample.labels.index) || { unmerged: 0, tombstones: 0 };
      if (sample.name === 'neardup_index_unmerged_entries') row.unmerged = sample.value;
      if (sample.name === 'neardup_index_tombstones') row.tombstones = sample.value;
      indexes.set(sample.labels.index, row);
    }
    $('health-note').textContent =
      `${single('neardup_documents').toLocaleString('en')} documents, ` +
      `${single('neardup_merges').toLocaleString('en')} merges since the start`;
    for (const [index, row] of [...indexes.entries()].sort()) {
      const tr = document.createElement('tr');
      tr.dataset.index = index;
      tr.append(
        element('td', index),
        element('td', row.unmerged.toLocaleString('en'), 'num'),
        element('td', row.tombstones.toLocaleString('en'), 'num'),
      );
      body.append(tr);
    }
  }

  async function createCollection(event) {
    event.preventDefault();
    clearError();
    const name = $('new-name').value.trim();
    let settings = {};
    const raw = $('new-settings').value.trim();
    if (raw) {
      try {
        settings = JSON.parse(raw);
      } catch (error) {
        showError(localError('invalid_settings', `settings are not JSON: ${error.message}`));
        return;
      }
    }
    if ($('new-store-text').checked) settings.store_text = true;
    try {
      const created = await api('PUT', collectionPath(name), settings);
      $('collection').value = '';
      sessionStorage.setItem(COLLECTION_STORAGE, created.name);
      await loadCollections();
      showOutcome([`Collection ${created.name} is ready.`]);
      $('new-collection').open = false;
    } catch (error) {
      showError(error);
    }
  }

  // ------------------------------------------------------------------ search and insert

  function request(text) {
    const body = { text };
    const limit = Number.parseInt($('limit').value, 10);
    if (Number.isFinite(limit)) body.limit = limit;
    if ($('html').checked) body.html = true;
    // min_coverage 0: every shared passage (by default only copies and containments).
    if ($('quotes').checked) body.min_coverage = 0;
    return body;
  }

  function busy(on) {
    $('search-button').disabled = on;
    $('insert-button').disabled = on;
  }

  function showOutcome(parts) {
    const outcome = $('outcome');
    outcome.replaceChildren(...parts);
    outcome.hidden = false;
  }

  async function search(event) {
    event.preventDefault();
    const name = $('collection').value;
    const text = $('text').value;
    clearError();
    $('outcome').hidden = true;
    busy(true);
    try {
      const answer = await api('POST', `${collectionPath(name)}/search`, request(text));
      showMatches(name, text, answer.matches, 'Matches');
    } catch (error) {
      showError(error);
    } finally {
      busy(false);
    }
  }

  async function insert() {
    const name = $('collection').value;
    const text = $('text').value;
    clearError();
    $('outcome').hidden = true;
    const body = request(text);
    delete body.limit;
    delete body.min_coverage;
    const id = $('doc-id').value.trim();
    if (id) body.id = id;
    const metadata = $('doc-metadata').value.trim();
    if (metadata) {
      try {
        body.metadata = JSON.parse(metadata);
      } catch (error) {
        showError(localError('invalid_metadata', `metadata is not JSON: ${error.message}`));
        return;
      }
    }
    if ($('skip-duplicates').checked) body.on_duplicate = 'skip';
    busy(true);
    try {
      const answer = await api('POST', `${collectionPath(name)}/documents`, body);
      const strong = element('strong', answer.id);
      let verdict;
      if (answer.inserted && answer.duplicate_of === null) verdict = 'a new story';
      else if (answer.inserted) verdict = `a near-duplicate of ${answer.duplicate_of}`;
      else if (answer.duplicate_of === answer.id) verdict = 'already stored with this text (a retry)';
      else verdict = `not stored: a near-duplicate of ${answer.duplicate_of}`;
      showOutcome([
        answer.inserted ? 'Inserted ' : 'Not inserted: ',
        strong,
        ` — ${verdict}, cluster ${answer.cluster_id}.`,
      ]);
      $('doc-id').value = '';
      showMatches(name, text, answer.matches, `Matches of ${answer.id}`);
      loadCollection(); // the stats and index health, in the background
    } catch (error) {
      showError(error);
    } finally {
      busy(false);
    }
  }

  function storedDocument(id) {
    if (!state.documents.has(id)) {
      const promise = api('GET', documentPath(state.matchesIn, id));
      promise.catch(() => state.documents.delete(id));
      state.documents.set(id, promise);
    }
    return state.documents.get(id);
  }

  function showMatches(name, text, matches, title) {
    state.text = text;
    state.matchesIn = name;
    state.documents = new Map();
    $('compare').hidden = true;
    $('results').hidden = false;
    $('results-title').textContent = `${title} (${matches.length})`;
    $('no-match').hidden = matches.length > 0;
    const body = $('matches').tBodies[0];
    body.replaceChildren();
    for (const match of matches) {
      const row = document.createElement('tr');
      row.dataset.id = match.id;
      const open = element('button', match.id, 'link');
      open.type = 'button';
      open.title = 'Open: the two texts side by side';
      open.addEventListener('click', () => openMatch(match, row));
      const idCell = element('td', null, 'id');
      idCell.append(open);
      const methods = element('td', null, 'methods');
      for (const method of match.methods) methods.append(element('span', method, 'method'));
      const cluster = element('td', '…', 'cluster id');
      row.append(
        idCell,
        element('td', match.similarity.toFixed(3), 'num similarity'),
        element('td', match.hamming_distance, 'num hamming'),
        methods,
        cluster,
      );
      body.append(row);
      storedDocument(match.id).then(
        (doc) => {
          cluster.textContent = doc.cluster_id;
        },
        () => {
          cluster.textContent = '—';
        },
      );
    }
  }

  // ------------------------------------------------------------------ side by side

  // Words as the service counts them: runs of letters and digits, and each character of
  // the scripts written without spaces (Chinese, Japanese, Thai...) on its own.
  const NO_SPACE = '\\p{Script=Han}\\p{Script=Hiragana}\\p{Script=Katakana}\\p{Script=Thai}\\p{Script=Lao}\\p{Script=Khmer}\\p{Script=Myanmar}';
  const WORD = new RegExp(`[${NO_SPACE}]|(?:(?![${NO_SPACE}])[\\p{L}\\p{N}\\p{M}])+`, 'gu');

  function words(text) {
    const found = [];
    for (const match of text.matchAll(WORD)) {
      found.push({
        start: match.index,
        end: match.index + match[0].length,
        key: match[0].normalize('NFKC').toLowerCase(),
      });
    }
    return found;
  }

  function grams(tokens, n) {
    const set = new Set();
    for (let i = 0; i + n <= tokens.length; i += 1) {
      set.add(tokens.slice(i, i + n).map((t) => t.key).join('\u0001'));
    }
    return set;
  }

  // Which words of `tokens` lie in a word n-gram that the other text has too.
  function covered(tokens, otherGrams, n) {
    const marked = new Array(tokens.length).fill(false);
    for (let i = 0; i + n <= tokens.length; i += 1) {
      const key = tokens.slice(i, i + n).map((t) => t.key).join('\u0001');
      if (otherGrams.has(key)) marked.fill(true, i, i + n);
    }
    return marked;
  }

  // The text with each run of shared words (and what lies between them) in a <mark>.
  function markShared(container, text, tokens, marked) {
    container.replaceChildren();
    let at = 0;
    let i = 0;
    while (i < tokens.length) {
      if (!marked[i]) {
        i += 1;
        continue;
      }
      let j = i;
      while (j + 1 < tokens.length && marked[j + 1]) j += 1;
      const start = tokens[i].start;
      const end = tokens[j].end;
      if (start > at) container.append(text.slice(at, start));
      container.append(element('mark', text.slice(start, end)));
      at = end;
      i = j + 1;
    }
    if (at < text.length) container.append(text.slice(at));
  }

  function sharedPassages(left, right) {
    const shingle = state.collection ? state.collection.settings.shingle : null;
    const size = shingle && shingle.unit === 'word' ? shingle.size : 3;
    const a = words(left);
    const b = words(right);
    const n = Math.max(1, Math.min(size, a.length, b.length));
    const leftMarked = covered(a, grams(b, n), n);
    const rightMarked = covered(b, grams(a, n), n);
    markShared($('left-text'), left, a, leftMarked);
    markShared($('right-text'), right, b, rightMarked);
    const share = (marked) =>
      marked.length ? Math.round((100 * marked.filter(Boolean).length) / marked.length) : 0;
    return `Marked: passages the two texts share (runs of word ${n}-grams); ` +
      `${share(leftMarked)}% of your text's words, ${share(rightMarked)}% of the match's.`;
  }

  // The text with the given [start, end) code point spans in <mark>s (overlaps merged).
  // Offsets are code points, as the service counts them: JavaScript strings count UTF-16
  // units, so the text is cut by code points.
  function markSpans(container, text, spans) {
    container.replaceChildren();
    const points = Array.from(text);
    const sorted = spans.map(([start, end]) => [start, end]).sort((x, y) => x[0] - y[0]);
    let at = 0;
    for (const [spanStart, end] of sorted) {
      const start = Math.max(spanStart, at);
      if (end <= start) continue;
      if (start > at) container.append(points.slice(at, start).join(''));
      container.append(element('mark', points.slice(start, end).join('')));
      at = end;
    }
    if (at < points.length) container.append(points.slice(at).join(''));
  }

  // The passages the service found (a collection with passages on), marked where it said.
  function reportedPassages(match, left, right) {
    markSpans($('left-text'), left, match.passages.map((p) => [p.start, p.end]));
    if (right !== null) {
      markSpans($('right-text'), right, match.passages.map((p) => [p.match_start, p.match_end]));
    }
    const percent = (share) => Math.round(100 * share);
    return `Marked: the ${match.passages.length} passage(s) the service found; ` +
      `${percent(match.query_coverage)}% of your text, ${percent(match.match_coverage)}% of ` +
      'the match.';
  }

  async function openMatch(match, row) {
    for (const other of $('matches').tBodies[0].rows) other.classList.toggle('open', other === row);
    clearError();
    let doc;
    try {
      doc = await storedDocument(match.id);
    } catch (error) {
      showError(error);
      return;
    }
    $('right-title').textContent = `Match ${doc.id}`;
    fillPairs($('right-meta'), [
      ['similarity', match.similarity.toFixed(3)],
      ['Hamming distance', match.hamming_distance],
      ['methods', match.methods.join(', ')],
      ['cluster', doc.cluster_id],
      ['created', doc.created_at],
      ...(doc.timestamp ? [['time', doc.timestamp]] : []),
      ['simhash', doc.simhash],
      ['metadata', doc.metadata === null ? '—' : JSON.stringify(doc.metadata)],
    ]);
    if (match.passages && (doc.text === null || doc.text === undefined)) {
      $('compare-summary').textContent = reportedPassages(match, state.text, null);
      $('right-text').replaceChildren(
        element('em', 'The collection keeps texts for its passages but does not give them ' +
          'out (store_text is false): your text is marked.'),
      );
    } else if (match.passages) {
      $('compare-summary').textContent = reportedPassages(match, state.text, doc.text);
    } else if (doc.text === null || doc.text === undefined) {
      $('left-text').replaceChildren(state.text);
      $('right-text').replaceChildren(
        element('em', 'This collection does not keep texts (store_text is false): only the ' +
          'fingerprints are stored, so the match cannot be shown.'),
      );
      $('compare-summary').textContent = '';
    } else {
      $('compare-summary').textContent = sharedPassages(state.text, doc.text);
    }
    $('compare').hidden = false;
    $('compare').scrollIntoView({ block: 'start' });
  }

  // ------------------------------------------------------------------ start

  function start() {
    $('key-form').addEventListener('submit', useKey);
    $('forget-key').addEventListener('click', forgetKey);
    $('collection').addEventListener('change', () => {
      clearError();
      loadCollection();
    });
    $('refresh').addEventListener('click', () => loadCollections());
    $('create-form').addEventListener('submit', createCollection);
    $('doc-form').addEventListener('submit', search);
    $('insert-button').addEventListener('click', insert);
    $('close-compare').addEventListener('click', () => {
      $('compare').hidden = true;
    });
    if (apiKey()) {
      $('key-panel').hidden = false;
      $('key-prompt').hidden = true;
    }
    watchReadiness(1);
  }

  // For tests and the curious: the pure functions.
  window.neardup = { parseMetrics, words, covered, grams };
  start();
})();
