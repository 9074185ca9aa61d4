// The chat panel's script, served as /app.js: the page's Content-Security-Policy allows no
// inline script (script-src 'self').
(() => {
  'use strict';
  // Everything from the model or a tool is put in the page with textContent, never as HTML.
  const KEY = 'chatPanelSession';
  const log = document.getElementById('log');
  const input = document.getElementById('input');
  const statusEl = document.getElementById('status');
  const entries = new Map();
  const els = new Map();
  let chain = Promise.resolve();
  let pending = 0;
  let localIds = -1;

  function newId() {
    const a = new Uint8Array(16);
    crypto.getRandomValues(a);
    return Array.from(a, b => b.toString(16).padStart(2, '0')).join('');
  }
  let sid = localStorage.getItem(KEY);
  if (!sid || !/^[A-Za-z0-9_-]{8,64}$/.test(sid)) { sid = newId(); localStorage.setItem(KEY, sid); }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function setStatus(t) { statusEl.textContent = t; }
  function setIdle() { document.body.dataset.idle = pending === 0 ? '1' : '0'; }

  function pretty(s) {
    try { return JSON.stringify(JSON.parse(s), null, 2); } catch (_) { return String(s); }
  }
  function summarize(t) {
    let v = t.result;
    try {
      const j = JSON.parse(t.result);
      if (t.isError && j && typeof j.error === 'string') v = j.error;
      else v = JSON.stringify(j);
    } catch (_) { /* plain text result */ }
    v = String(v);
    return (t.isError ? 'Error: ' : 'Result: ') + (v.length > 200 ? v.slice(0, 200) + '…' : v);
  }

  // A count for a person: 12,345.
  function num(n) { return Number(n || 0).toLocaleString('en-US'); }
  // What an answer cost, in one small line: tokens in (cached), out (reasoning), price.
  function runLine(r) {
    let t = num(r.promptTokens) + ' tokens in';
    if (r.cacheReadTokens) t += ' (' + num(r.cacheReadTokens) + ' cached)';
    if (r.cacheWriteTokens) t += ', ' + num(r.cacheWriteTokens) + ' written to cache';
    t += ' · ' + num(r.completionTokens) + ' out';
    if (r.reasoningTokens) t += ' (' + num(r.reasoningTokens) + ' reasoning)';
    if (typeof r.costUsd === 'number') t += ' · $' + (r.costUsd < 0.01 ? r.costUsd.toFixed(4) : r.costUsd.toFixed(2));
    return t;
  }
  // Pictures, sounds and files of an entry, all from the panel's own media endpoint (the
  // page's policy allows no other source): a picture in place, a sound with the browser's
  // player, a file as a download link with its name, type and size. One the panel does not
  // serve is named in a line instead.
  function pictures(entry) {
    const list = entry.images || [];
    if (!list.length) return null;
    const row = el('div', 'images');
    for (const im of list) {
      const src = typeof im.src === 'string' && im.src.startsWith('/api/') ? im.src : null;
      if (src && im.kind === 'audio') {
        const box = el('div', 'audio');
        const au = document.createElement('audio');
        au.controls = true;
        au.preload = 'metadata';
        au.src = src;
        box.append(el('div', 'audio-name', fileWords(im, 'Sound')), au);
        row.append(box);
      } else if (src && (im.link || im.kind === 'file')) {
        // served as a download (Content-Disposition: attachment); a PDF may open in a new tab
        const a = el('a', 'file-link', fileWords(im, 'File'));
        a.href = src;
        if (im.mediaType === 'application/pdf') { a.target = '_blank'; a.rel = 'noopener noreferrer'; }
        else a.download = im.name || '';
        row.append(a);
      } else if (src && im.kind !== 'file') {
        const img = document.createElement('img');
        img.src = src;
        img.alt = 'Picture (' + (im.mediaType || 'image')
          + (Number.isSafeInteger(im.width) ? ', ' + im.width + '×' + im.height : '') + ')';
        img.loading = 'lazy';
        if (Number.isSafeInteger(im.width) && Number.isSafeInteger(im.height)) { img.width = im.width; img.height = im.height; }
        row.append(img);
      } else {
        row.append(el('div', 'image-text', im.text));
      }
    }
    return row;
  }
  // A file's words: its name (or what it is), its media type and size.
  function fileWords(im, what) {
    const bits = [im.mediaType || 'unknown type'];
    if (Number.isSafeInteger(im.size)) bits.push(size(im.size));
    return (im.name || what) + ' (' + bits.join(', ') + ')';
  }
  // The model's reasoning, folded (a closed <details>) above its text.
  function thinking(entry) {
    if (!entry.reasoning) return null;
    const d = document.createElement('details');
    d.className = 'reasoning';
    d.append(el('summary', null, 'Reasoning'), el('div', 'reasoning-text', entry.reasoning));
    return d;
  }

  function render(entry) {
    // the same entry again (from the events stream and the answer's stream both): the shown
    // one stays, so a button under the pointer is not replaced
    const prev = entries.get(entry.id);
    // an answer's cost comes with its own stream only: the same entry from the events stream
    // (without it) keeps it
    if (prev && prev.run && !entry.run) entry.run = prev.run;
    if (prev && els.has(entry.id) && JSON.stringify(prev) === JSON.stringify(entry)) return;
    entries.set(entry.id, entry);
    const box = el('div', 'entry entry-' + entry.kind);
    box.dataset.id = String(entry.id);
    if (entry.kind === 'user') {
      box.append(el('div', 'who', 'You'));
      if (entry.text || !(entry.images || []).length) box.append(el('div', 'text', entry.text));
      const pics = pictures(entry);
      if (pics) box.append(pics);
    } else if (entry.kind === 'assistant') {
      box.append(el('div', 'who', 'Agent'));
      const r = thinking(entry);
      if (r) box.append(r);
      box.append(el('div', 'text', entry.text));
    } else if (entry.kind === 'reasoning') {
      box.classList.add('entry-assistant');
      box.append(el('div', 'who', 'Agent'));
      const r = thinking(entry);
      if (r) box.append(r);
    } else if (entry.kind === 'message') {
      box.append(el('div', 'who', 'Message from ' + (entry.from || 'agent')), el('div', 'text', entry.text));
      const replies = entry.quickReplies || [];
      if (replies.length) {
        const row = el('div', 'quick-replies');
        row.setAttribute('role', 'group');
        row.setAttribute('aria-label', 'Quick replies');
        for (const q of replies) {
          const b = el('button', 'quick-reply', q);
          b.type = 'button';
          b.disabled = !!entry.answered;
          if (entry.chosen === q) b.classList.add('chosen');
          b.addEventListener('click', () => {
            if (b.disabled) return;
            send(q, entry.id);
          });
          row.append(b);
        }
        box.append(row);
      }
    } else if (entry.kind === 'tool') {
      const t = entry.tool || {};
      const done = t.result !== null && t.result !== undefined;
      box.classList.add(!done ? 'running' : (t.isError ? 'failed' : 'ok'));
      box.append(el('div', 'who', 'Tool ' + (t.name || entry.text) + ' — ' + (!done ? 'running…' : (t.isError ? 'failed' : 'done'))));
      if (done) box.append(el('div', 'summary', summarize(t)));
      const pics = pictures(entry);
      if (pics) box.append(pics);
      const d = document.createElement('details');
      d.append(el('summary', null, 'arguments' + (done ? ' and result' : '')));
      d.append(el('div', 'label', 'arguments'), el('pre', 'args', JSON.stringify(t.arguments, null, 2)));
      if (done) d.append(el('div', 'label', t.isError ? 'error' : 'result'), el('pre', 'result', pretty(t.result)));
      box.append(d);
    } else if (entry.kind === 'error') {
      box.append(el('div', 'who', 'Error'), el('div', 'text', entry.text));
    } else {
      box.append(el('div', 'text', entry.text));
    }
    if (entry.run) box.append(el('div', 'run', runLine(entry.run)));
    const old = els.get(entry.id);
    if (old) old.replaceWith(box); else log.append(box);
    els.set(entry.id, box);
    log.scrollTop = log.scrollHeight;
  }

  // the first id of an entry shown while an answer streams, before it is stored (state/mod.rs)
  const LIVE_IDS = 2 ** 52;
  function localError(text) { render({ id: localIds--, kind: 'error', text: text }); }

  // Calls waiting for the person's approval: the tool and its exact arguments as text, and
  // Approve / Reject buttons (the quick-reply buttons). One box, replaced by every update; a
  // decided call's buttons are disabled at once, so a second click sends nothing.
  let approvalBox = null;
  function renderApproval(p) {
    const calls = (p && p.calls) || [];
    if (approvalBox && approvalBox.dataset.calls === JSON.stringify(calls.map(c => c.id))) {
      // the same calls: keep the box (and its buttons), take the fresh tokens
      for (const c of calls) {
        const row = approvalBox.querySelector('.call[data-call-id="' + CSS.escape(c.id) + '"]');
        if (row) row.dataset.token = c.token;
      }
      return;
    }
    if (approvalBox) { approvalBox.remove(); approvalBox = null; }
    if (!calls.length) return;
    const box = el('div', 'entry entry-approval');
    box.dataset.calls = JSON.stringify(calls.map(c => c.id));
    box.append(el('div', 'who', 'Approval needed'));
    if (p.text) box.append(el('div', 'text', p.text));
    for (const c of calls) {
      const row = el('div', 'call');
      row.dataset.callId = c.id;
      row.dataset.token = c.token;
      row.append(el('div', 'text', 'The agent wants to run ' + c.name + ' with:'));
      row.append(el('pre', 'args', JSON.stringify(c.arguments, null, 2)));
      if (c.maybe_ran) row.append(el('div', 'text', 'This call was approved before and may already have run.'));
      const buttons = el('div', 'quick-replies');
      buttons.setAttribute('role', 'group');
      buttons.setAttribute('aria-label', 'Approve or reject ' + c.name);
      const approve = el('button', 'quick-reply approve', 'Approve');
      const reject = el('button', 'quick-reply reject', 'Reject');
      for (const [b, approved] of [[approve, true], [reject, false]]) {
        b.type = 'button';
        b.addEventListener('click', () => {
          if (b.disabled) return;
          approve.disabled = true; reject.disabled = true;
          b.classList.add('chosen');
          decide({ call_id: c.id, token: row.dataset.token, approved: approved });
        });
        buttons.append(b);
      }
      row.append(buttons);
      box.append(row);
    }
    log.append(box);
    approvalBox = box;
    log.scrollTop = log.scrollHeight;
  }

  // Who decided what: each approval and each answer to an MCP question, with the person
  // and the time, shown once in the conversation (`decisions` of GET /api/sessions/{id}).
  const shownDecisions = new Set();
  function renderDecisions(list) {
    for (const d of list || []) {
      const key = d.kind === 'approval' ? 'a:' + d.round + ':' + d.callId : 'q:' + d.atMs + ':' + d.question;
      if (shownDecisions.has(key)) continue;
      shownDecisions.add(key);
      const box = el('div', 'entry entry-decision');
      box.dataset.decision = d.kind;
      const when = new Date(d.atMs).toLocaleString();
      let line;
      if (d.kind === 'approval') {
        line = (d.approved ? 'Approved' : 'Rejected') + ' by ' + d.principal + ' at ' + when + ': ' + d.tool
          + (d.reason ? ' (' + d.reason + ')' : '');
        box.append(el('div', 'text', line));
        box.append(el('pre', 'args', JSON.stringify(d.arguments, null, 2)));
      } else {
        line = 'Answered (' + d.action + ') by ' + d.principal + ' at ' + when + ': ' + d.service + ' asked "' + d.message + '"';
        box.append(el('div', 'text', line));
        if (d.content) box.append(el('pre', 'args', JSON.stringify(d.content, null, 2)));
      }
      log.append(box);
    }
  }

  // The address a URL-mode question may link to, or null: https, or http to this machine, as
  // the browser itself parses the URL (the server checked the same before, url_may_be_link).
  function linkable(u) {
    let p;
    try { p = new URL(u); } catch (_) { return null; }
    const local = p.hostname === '127.0.0.1' || p.hostname === 'localhost' || p.hostname === '[::1]';
    return p.protocol === 'https:' || (p.protocol === 'http:' && local) ? p.href : null;
  }

  // The choices a form field offers, as [{ value, title }], or null for a field typed in:
  // a boolean (Yes / No), an enum (its `enumNames` as titles, the older form), a titled enum
  // (`oneOf` of `{const, title}`), and for a multi-select (`type: array`) its items' `enum` or
  // `anyOf` / `oneOf`.
  function choicesOf(p) {
    const titled = list => Array.isArray(list) && list.every(o => o && o.const !== undefined)
      ? list.map(o => ({ value: o.const, title: o.title === undefined ? o.const : o.title })) : null;
    const listed = (list, names) => Array.isArray(list)
      ? list.map((v, i) => ({ value: v, title: Array.isArray(names) && names[i] !== undefined ? names[i] : v })) : null;
    if (p.type === 'boolean') return [{ value: true, title: 'Yes' }, { value: false, title: 'No' }];
    if (p.type === 'array') {
      const it = p.items || {};
      return listed(it.enum, it.enumNames) || titled(it.anyOf) || titled(it.oneOf);
    }
    return listed(p.enum, p.enumNames) || titled(p.oneOf);
  }

  // An MCP server's question (elicitation): a form of the schema's primitive fields (buttons
  // for enums and booleans, toggles for a multi-select), or for URL mode a link that the person
  // opens themselves (text when it is not a safe link). A field's `default` is shown filled in
  // (its button chosen, its text in the box) and is what Accept sends unless the person changes
  // it. Answered once: the buttons are disabled at the first click.
  // A running MCP tool's progress: one line per tool of the answer, updated in place, gone
  // when the answer ends. Text only (the server chose it): textContent, never HTML.
  const progressEls = new Map();
  function renderProgress(p) {
    if (!p || typeof p.tool !== 'string' || typeof p.progress !== 'number') return;
    const key = String(p.service) + '/' + p.tool;
    let box = progressEls.get(key);
    if (!box) {
      box = el('div', 'entry entry-progress');
      box.dataset.progress = key;
      box.append(el('div', 'who', 'Running ' + p.tool + ' (' + p.service + ')'), el('progress'), el('div', 'text'));
      progressEls.set(key, box);
      log.append(box);
    }
    const bar = box.querySelector('progress');
    const total = typeof p.total === 'number' && p.total > 0 ? p.total : null;
    if (total !== null) { bar.max = total; bar.value = Math.min(p.progress, total); } else bar.removeAttribute('value');
    box.querySelector('.text').textContent = (total !== null ? p.progress + ' of ' + total : String(p.progress)) + (p.message ? ' — ' + p.message : '');
    log.scrollTop = log.scrollHeight;
  }
  function clearProgress() {
    for (const box of progressEls.values()) box.remove();
    progressEls.clear();
  }

  // A sign-in an MCP server needs (OAuth): the link opens the authorization server in a new
  // window; it comes back to the panel by itself (`signed-in`). "Not now" declines.
  function renderSignIn(q) {
    const box = el('div', 'entry entry-elicitation entry-signin');
    box.dataset.elicitation = String(q.id);
    box.append(el('div', 'who', 'Sign in to ' + q.service), el('div', 'text', q.message));
    const href = q.link === true && typeof q.url === 'string' ? linkable(q.url) : null;
    if (href) {
      const a = el('a', 'link sign-in', q.again ? 'Sign in again' : 'Sign in');
      a.href = href; a.target = '_blank'; a.rel = 'noopener noreferrer';
      box.append(a);
    } else {
      box.append(el('div', 'text', 'The sign-in page is not one the panel links to; check this address before you copy it:'),
        el('div', 'url-text', String(q.url)));
    }
    const row = el('div', 'quick-replies answer');
    const b = el('button', 'quick-reply decline', 'Not now');
    b.type = 'button';
    b.addEventListener('click', async () => {
      if (b.disabled) return;
      b.disabled = true;
      // declined: the link goes (its sign-in is forgotten by the panel)
      box.classList.add('done');
      const a = box.querySelector('a.sign-in');
      if (a) a.remove();
      box.append(el('div', 'text', 'Not signed in.'));
      try {
        const res = await fetch('/api/sessions/' + encodeURIComponent(sid) + '/elicitations/' + q.id, {
          method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ action: 'decline' })
        });
        if (!res.ok) localError('Could not answer: HTTP ' + res.status);
      } catch (err) { localError('Could not answer: ' + err); }
    });
    row.append(b);
    box.append(row);
    log.append(box);
    log.scrollTop = log.scrollHeight;
  }
  function signedIn(d) {
    const box = log.querySelector('.entry-signin[data-elicitation="' + String(d.id) + '"]');
    if (!box) return;
    box.classList.add('done');
    for (const o of box.querySelectorAll('button')) o.disabled = true;
    const a = box.querySelector('a.sign-in');
    if (a) a.remove();
    box.append(el('div', 'text signed-in', d.ok ? 'Signed in.' : 'The sign-in did not complete.'));
  }

  function renderElicitation(q) {
    const box = el('div', 'entry entry-elicitation');
    box.dataset.elicitation = String(q.id);
    box.append(el('div', 'who', 'Question from ' + q.service), el('div', 'text', q.message));
    const values = {};
    const props = (q.schema && q.schema.properties) || {};
    for (const [name, p] of Object.entries(q.mode === 'form' ? props : {})) {
      if (!p || typeof p !== 'object') continue;
      const label = el('label', null, (p.title || name) + (p.description ? ' — ' + p.description : ''));
      box.append(label);
      const choices = choicesOf(p);
      const hasDefault = p.default !== undefined && p.default !== null;
      if (choices && p.type === 'array') {
        // several may be chosen: each button toggles its value in or out
        const row = el('div', 'quick-replies');
        row.dataset.field = name;
        const chosen = new Set(hasDefault && Array.isArray(p.default) ? p.default : []);
        if (hasDefault && Array.isArray(p.default)) values[name] = p.default.slice();
        for (const c of choices) {
          const b = el('button', 'quick-reply choice', c.title);
          b.type = 'button';
          const mark = on => { b.classList.toggle('chosen', on); b.setAttribute('aria-pressed', on ? 'true' : 'false'); };
          mark(chosen.has(c.value));
          b.addEventListener('click', () => {
            if (chosen.has(c.value)) chosen.delete(c.value); else chosen.add(c.value);
            mark(chosen.has(c.value));
            values[name] = choices.map(o => o.value).filter(v => chosen.has(v));
          });
          row.append(b);
        }
        box.append(row);
      } else if (choices) {
        const row = el('div', 'quick-replies');
        row.dataset.field = name;
        const buttons = [];
        for (const c of choices) {
          const b = el('button', 'quick-reply choice', c.title);
          b.type = 'button';
          const on = hasDefault && p.default === c.value;
          b.classList.toggle('chosen', on);
          b.setAttribute('aria-pressed', on ? 'true' : 'false');
          b.addEventListener('click', () => {
            values[name] = c.value;
            for (const o of buttons) { o.classList.remove('chosen'); o.setAttribute('aria-pressed', 'false'); }
            b.classList.add('chosen');
            b.setAttribute('aria-pressed', 'true');
          });
          buttons.push(b);
          row.append(b);
        }
        if (hasDefault) values[name] = p.default;
        box.append(row);
      } else if (p.type === 'string' || p.type === 'number' || p.type === 'integer') {
        const input = document.createElement('input');
        input.name = name;
        const kinds = { email: 'email', uri: 'url', date: 'date' };
        input.type = p.type === 'string' ? (kinds[p.format] || 'text') : 'number';
        if (p.type !== 'string') {
          input.step = p.type === 'integer' ? '1' : 'any';
          if (typeof p.minimum === 'number') input.min = String(p.minimum);
          if (typeof p.maximum === 'number') input.max = String(p.maximum);
        }
        if (hasDefault) {
          input.value = String(p.default);
          // a default the input type cannot show (a date not as yyyy-mm-dd) is shown as text
          if (input.value !== String(p.default)) { input.type = 'text'; input.value = String(p.default); }
          values[name] = p.default;
        }
        input.addEventListener('input', () => {
          // an emptied number box answers nothing for that field
          if (input.value === '' && p.type !== 'string') delete values[name];
          else values[name] = input.value;
        });
        label.append(input);
      }
    }
    if (q.mode === 'url' && typeof q.url === 'string' && q.url) {
      // A link only when the server said so and this page agrees: the server of the
      // question chooses the URL, and a javascript: one would run here. Anything else is text.
      const href = q.link === true ? linkable(q.url) : null;
      if (href) {
        const a = el('a', 'link', q.url);
        a.href = href; a.target = '_blank'; a.rel = 'noopener noreferrer';
        box.append(el('div', 'text', 'Open this page yourself to continue:'), a);
      } else {
        box.append(el('div', 'text', 'The server asks you to open this address; it is not a web page the panel links to, so check it before you copy it:'),
          el('div', 'url-text', q.url));
      }
    }
    const row = el('div', 'quick-replies answer');
    const buttons = [];
    for (const [label, action] of [['Accept', 'accept'], ['Decline', 'decline'], ['Cancel', 'cancel']]) {
      const b = el('button', 'quick-reply ' + action, label);
      b.type = 'button';
      b.addEventListener('click', async () => {
        if (b.disabled) return;
        for (const o of box.querySelectorAll('button, input')) o.disabled = true;
        b.classList.add('chosen');
        const content = {};
        for (const [k, v] of Object.entries(values)) {
          const p = props[k] || {};
          content[k] = (p.type === 'number' || p.type === 'integer') && typeof v === 'string' ? Number(v) : v;
        }
        const body = action === 'accept' ? { action: action, content: content } : { action: action };
        try {
          const res = await fetch('/api/sessions/' + encodeURIComponent(sid) + '/elicitations/' + q.id, {
            method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body)
          });
          if (!res.ok) localError('Could not answer: HTTP ' + res.status);
        } catch (err) { localError('Could not answer: ' + err); }
      });
      buttons.push(b); row.append(b);
    }
    box.append(row);
    log.append(box);
    log.scrollTop = log.scrollHeight;
  }

  function decide(decision) {
    pending++; setIdle();
    chain = chain.then(() => stream('/approvals', { decisions: [decision] }))
      .then(() => load(true))
      .catch(err => localError('Could not send the decision: ' + err))
      .finally(() => { pending--; setIdle(); setStatus(''); });
  }

  function openReplyIds() {
    const ids = [];
    for (const e of entries.values()) {
      if (e.kind === 'message' && (e.quickReplies || []).length && !e.answered) ids.push(e.id);
    }
    return ids;
  }

  // A reply (clicked or typed) answers every quick-reply set still open above it; the server
  // records the same, so a reload shows the buttons disabled.
  function answerOpen(text, inReplyTo) {
    for (const id of openReplyIds()) {
      const e = entries.get(id);
      e.answered = true;
      if (id === inReplyTo) e.chosen = text;
      const box = els.get(id);
      if (!box) continue;
      for (const b of box.querySelectorAll('button.quick-reply')) {
        b.disabled = true;
        if (id === inReplyTo && b.textContent === text) b.classList.add('chosen');
      }
    }
  }

  function send(text, inReplyTo, images, resources) {
    if (inReplyTo === undefined) {
      const open = openReplyIds();
      inReplyTo = open.length ? open[open.length - 1] : null;
    }
    answerOpen(text, inReplyTo);
    pending++; setIdle();
    chain = chain.then(() => post(text, inReplyTo, images, resources))
      .then(taken => {
        // a message refused with its picture: its text comes back, to send with another
        if (taken === false && ((images && images.length) || (resources && resources.length)) && !input.value) input.value = text;
        if (!follower) return load(true);
      })
      .catch(err => localError('Could not send: ' + err))
      .finally(() => { pending--; setIdle(); setStatus(''); });
  }

  // Whether the server took the message (false: refused, with its reason shown).
  async function post(text, inReplyTo, images, resources) {
    const body = { text: text };
    if (inReplyTo !== null && inReplyTo !== undefined) body.inReplyTo = inReplyTo;
    if (images && images.length) body.attachments = images;
    if (resources && resources.length) body.resources = resources;
    return stream('/messages', body);
  }

  async function stream(path, body, retried) {
    setStatus('answering…');
    const res = await fetch('/api/sessions/' + encodeURIComponent(sid) + path, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body)
    });
    if (res.status === 404 && path === '/messages' && !retried) {
      // behind authentication the server names conversations: get one, then send again
      const made = await fetch('/api/sessions', { method: 'POST' });
      if (made.ok) {
        sid = (await made.json()).sessionId;
        localStorage.setItem(KEY, sid);
        await load();
        return stream(path, body, true);
      }
    }
    if (!res.ok) {
      let msg = 'HTTP ' + res.status;
      try { const j = await res.json(); if (j && j.error) msg = j.error; } catch (_) { /* not JSON */ }
      localError(msg);
      return false;
    }
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      let value, done;
      try {
        ({ value, done } = await reader.read());
      } catch (err) {
        // the server went away mid-answer (a worker restarting): the message was taken; the
        // events stream shows what happens to it, from whichever worker picks it up. What this
        // answer showed while it streamed (ids from 2^52 up, never stored) will never be
        // replaced by its stored entries: it goes, and the stored rows show instead
        for (const id of Array.from(els.keys())) {
          if (id >= LIVE_IDS) { els.get(id).remove(); els.delete(id); entries.delete(id); }
        }
        localError('The connection was lost while the answer was running (' + err + '). What the server stores still shows here.');
        return true;
      }
      if (done) { clearProgress(); break; }
      buf += dec.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, i);
        buf = buf.slice(i + 2);
        frame && handleFrame(frame);
      }
    }
    return true;
  }

  function handleFrame(frame) {
    let event = 'message', data = '';
    for (const line of frame.split('\n')) {
      if (line.startsWith(':')) continue;
      const c = line.indexOf(':');
      const k = c < 0 ? line : line.slice(0, c);
      let v = c < 0 ? '' : line.slice(c + 1);
      if (v.startsWith(' ')) v = v.slice(1);
      if (k === 'event') event = v; else if (k === 'data') data += (data ? '\n' : '') + v;
    }
    if (!data) return;
    let d;
    try { d = JSON.parse(data); } catch (_) { return; }
    if (event === 'entry' || event === 'update') {
      // a stored entry replaces the one shown while the answer streamed
      if (d.replaces !== undefined && d.replaces !== null) {
        const old = els.get(d.replaces);
        if (old) old.remove();
        els.delete(d.replaces);
        entries.delete(d.replaces);
      }
      render(d);
    } else if (event === 'approval') {
      renderApproval(d);
    } else if (event === 'elicitation') {
      if (d.mode === 'signin') renderSignIn(d); else renderElicitation(d);
    } else if (event === 'signed-in') {
      signedIn(d);
    } else if (event === 'progress') {
      renderProgress(d);
    } else if (event === 'delta') {
      const e = entries.get(d.id);
      if (!e) return;
      e.text += d.text;
      const t = els.get(d.id) && els.get(d.id).querySelector('.text');
      if (t) t.textContent = e.text;
      log.scrollTop = log.scrollHeight;
    }
  }

  // The conversation as stored, from whichever worker serves it: an EventSource on the events
  // stream, from the row after those the page loaded. When its connection breaks (a worker
  // restarted, a load balancer sent the reconnect to another worker) the browser reconnects by
  // itself with Last-Event-ID and the stream goes on after the last row shown: nothing missed,
  // nothing shown twice (an entry's id comes from its stored row, so the same entry from the
  // answer's own stream replaces, never repeats). A stream the server refused (an HTTP error
  // ends an EventSource for good) is opened again after a pause.
  let follower = null;
  let lastRow = 0;
  let busyShown = false;
  function follow(after) {
    if (follower) follower.close();
    lastRow = after;
    const es = new EventSource('/api/sessions/' + encodeURIComponent(sid) + '/events?after=' + after);
    follower = es;
    es.addEventListener('row', ev => {
      if (es !== follower) return;
      let d;
      try { d = JSON.parse(ev.data); } catch (_) { return; }
      for (const x of (d && d.events) || []) if (x && x.entry) render(x.entry);
      const n = Number(ev.lastEventId);
      if (Number.isSafeInteger(n) && n > lastRow) lastRow = n;
    });
    es.addEventListener('turn', ev => {
      if (es !== follower) return;
      let d;
      try { d = JSON.parse(ev.data); } catch (_) { return; }
      const busy = !!(d && d.busy);
      if (pending === 0) setStatus(busy ? 'an answer is still running…' : '');
      // an answer that ran elsewhere (another tab, another worker) may have ended waiting
      // for an approval: show it
      if (busyShown && !busy && pending === 0) refreshApproval();
      busyShown = busy;
    });
    es.addEventListener('error', () => {
      if (es !== follower || es.readyState !== EventSource.CLOSED) return;
      setTimeout(() => { if (es === follower) follow(lastRow); }, 2000);
    });
  }

  // The conversation as the server keeps it (`GET /api/sessions/{id}`).
  async function fetchSession() {
    const res = await fetch('/api/sessions/' + encodeURIComponent(sid));
    // behind authentication an id the server never gave out (a fresh page's) is not found:
    // nothing to show yet; the first message asks the server for a conversation
    if (res.status === 404) {
      return { sessionId: sid, busy: false, entries: [], pending: null, decisions: [], lastEventId: 0 };
    }
    const s = await res.json();
    // a browser login whose session ended: sign in again
    if (res.status === 401 && s.login === '/login') { location.assign('/login'); }
    if (!res.ok) throw new Error(s.error || ('HTTP ' + res.status));
    if (Number.isSafeInteger(s.maxImageBytes)) {
      maxImageBytes = s.maxImageBytes;
      document.getElementById('attach').hidden = maxImageBytes === 0;
    }
    if (Array.isArray(s.attachTypes) && s.attachTypes.every(t => typeof t === 'string')) {
      TYPES = s.attachTypes;
      picker.accept = TYPES.join(',');
    }
    return s;
  }

  async function refreshApproval() {
    try {
      const s = await fetchSession();
      if (pending === 0) renderApproval(s.pending);
      renderDecisions(s.decisions);
    } catch (_) { /* the events stream shows the conversation; this is only the box */ }
  }

  // Shows the conversation as stored and follows it. `keep`: add to what is shown (the same
  // entries stay as they are) instead of drawing the page anew.
  async function load(keep) {
    let s;
    try {
      s = await fetchSession();
    } catch (err) {
      localError('Could not load the conversation: ' + err);
      document.body.dataset.ready = '1';
      return;
    }
    if (!keep) {
      log.textContent = '';
      entries.clear(); els.clear();
      approvalBox = null;
      shownDecisions.clear();
    }
    for (const e of s.entries) render(e);
    renderDecisions(s.decisions);
    renderApproval(s.pending);
    busyShown = !!s.busy;
    // A conversation that has not started is followed from its first message (below, in
    // send): a stream of a conversation no worker has opened would be read on a timer.
    const last = Number.isSafeInteger(s.lastEventId) ? s.lastEventId : 0;
    if (last > 0 || s.busy || s.entries.length) {
      // (a page that adds to what it shows keeps the stream it has: it goes on by itself)
      if (!keep || !follower) follow(last);
    } else if (follower) { follower.close(); follower = null; }
    document.body.dataset.ready = '1';
    if (pending === 0) setStatus(s.busy ? 'an answer is still running…' : '');
  }

  // A picture, sound or file to send with the next message: of a type the panel takes
  // (`attachTypes`, the server's list) within its limit (checked here to spare the upload, and
  // again by the server, which decides).
  let TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];
  const picker = document.getElementById('picture');
  const attachedEl = document.getElementById('attached');
  let maxImageBytes = 5 * 1024 * 1024;
  let attached = null;
  function size(n) {
    if (n >= 1048576) return (n / 1048576).toFixed(n % 1048576 ? 1 : 0) + ' MiB';
    if (n >= 1024) return Math.ceil(n / 1024) + ' KiB';
    return n + ' bytes';
  }
  function clearAttached() {
    attached = null;
    attachedEl.textContent = '';
    attachedEl.hidden = true;
  }
  function base64(bytes) {
    let s = '';
    for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    return btoa(s);
  }
  document.getElementById('attach').addEventListener('click', () => picker.click());
  picker.addEventListener('change', async () => {
    const f = picker.files && picker.files[0];
    if (!f) return;
    clearAttached();
    try {
      if (!TYPES.includes(f.type)) {
        localError('The file "' + f.name + '" is not one the panel takes' + (f.type ? ' (' + f.type + ')' : '') + ': attach one of ' + TYPES.join(', ') + '.');
        return;
      }
      if (f.size > maxImageBytes) {
        localError('The file "' + f.name + '" is ' + size(f.size) + '; attachments may be at most ' + size(maxImageBytes) + '. Attach a smaller one.');
        return;
      }
      const data = base64(new Uint8Array(await f.arrayBuffer()));
      attached = { mediaType: f.type, data: data, name: f.name };
      attachedEl.append(el('span', 'name', f.name + ' (' + size(f.size) + ')'));
      const x = el('button', 'remove', '×');
      x.type = 'button';
      x.title = 'Remove the attachment';
      x.setAttribute('aria-label', 'Remove the attachment');
      x.addEventListener('click', clearAttached);
      attachedEl.append(x);
      attachedEl.hidden = false;
    } catch (err) {
      localError('Could not read the file: ' + err);
    } finally {
      picker.value = '';
    }
  });

  // The MCP servers' resources and prompts, when the panel offers them (ChatPanel::offer_mcp;
  // GET /api/mcp answers 404 otherwise and no list shows). A resource chosen is read by the
  // server into the next message; a prompt chosen asks for its arguments (the server suggests
  // values as they are typed) and puts its messages in the input. Everything the servers say
  // is shown as text.
  const MAX_CHOSEN = 3;
  const chosenEl = document.getElementById('chosen');
  let chosen = [];
  function clearChosen() {
    chosen = [];
    drawChosen();
  }
  function drawChosen() {
    chosenEl.textContent = '';
    for (const r of chosen) {
      chosenEl.append(el('span', 'name', r.label));
      const x = el('button', 'remove', '×');
      x.type = 'button';
      x.title = 'Remove ' + r.label;
      x.setAttribute('aria-label', 'Remove ' + r.label);
      x.addEventListener('click', () => { chosen = chosen.filter(c => c !== r); drawChosen(); });
      chosenEl.append(x);
    }
    chosenEl.hidden = chosen.length === 0;
    for (const b of document.querySelectorAll('#resources button[data-uri]')) {
      b.classList.toggle('chosen', chosen.some(c => c.service === b.dataset.service && c.uri === b.dataset.uri));
    }
  }
  // Watching a resource: the person's own subscription (POST /api/mcp/watch), kept by the
  // server across reloads; a watched resource that changes is marked "changed". The switch
  // shows what the server answered.
  let watched = new Set();
  function watchButton(service, uri, label) {
    const key = service + ' ' + uri;
    const w = el('button', 'watch');
    w.type = 'button';
    w.dataset.watchService = service; w.dataset.watchUri = uri;
    function draw() {
      const on = watched.has(key);
      w.textContent = on ? 'Watching' : 'Watch';
      w.setAttribute('aria-pressed', String(on));
      w.title = (on ? 'Stop watching ' : 'Watch for changes to ') + label;
    }
    draw();
    w.addEventListener('click', async () => {
      w.disabled = true;
      try {
        const j = await postJson('/api/mcp/watch', { service: service, uri: uri, watch: !watched.has(key) });
        watched = new Set((j.watched || []).map(x => x.service + ' ' + x.uri));
      } catch (err) {
        localError('Not changed: ' + err.message);
      } finally {
        w.disabled = false;
        for (const b of document.querySelectorAll('#resources button.watch')) b.dispatchEvent(new Event('redraw'));
      }
    });
    w.addEventListener('redraw', draw);
    return w;
  }
  function offerButton(title, service, detail) {
    const b = el('button', null, title);
    b.type = 'button';
    b.append(el('div', 'service', service + (detail ? ' · ' + detail : '')));
    const li = el('li');
    li.append(b);
    return [li, b];
  }
  async function postJson(path, body) {
    const res = await fetch(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    let j = {};
    try { j = await res.json(); } catch (_) { /* not JSON */ }
    if (!res.ok) throw new Error(j.error || ('HTTP ' + res.status));
    return j;
  }
  // Suggestions for an argument as it is typed: the server's completions, asked at most once
  // per pause in typing (250 ms), only the latest answer shown, at most 20.
  function completes(i, list, body) {
    let asked = 0;
    let timer = null;
    i.addEventListener('input', () => {
      const n = ++asked;
      clearTimeout(timer);
      timer = setTimeout(async () => {
        try {
          const j = await postJson('/api/mcp/complete', Object.assign({ argument: i.name, value: i.value }, body));
          if (n !== asked) return;
          list.textContent = '';
          for (const v of (j.values || []).slice(0, 20)) { const o = document.createElement('option'); o.value = String(v); list.append(o); }
        } catch (_) { /* no suggestions */ }
      }, 250);
    });
  }
  function promptForm(p) {
    const form = document.getElementById('prompt-form');
    form.textContent = '';
    form.dataset.prompt = p.name;
    form.append(el('div', 'who', (p.title || p.name) + (p.description ? ' — ' + p.description : '')));
    const inputs = [];
    for (const a of p.arguments || []) {
      const label = el('label', null, a.name + (a.required ? ' (required)' : '') + (a.description ? ' — ' + a.description : ''));
      const i = document.createElement('input');
      i.name = a.name;
      const list = document.createElement('datalist');
      list.id = 'complete-' + inputs.length;
      i.setAttribute('list', list.id);
      completes(i, list, { service: p.service, prompt: p.name });
      label.append(i, list);
      form.append(label);
      inputs.push(i);
    }
    const row = el('div', 'quick-replies');
    const use = el('button', 'quick-reply use-prompt', 'Use prompt');
    use.type = 'button';
    use.addEventListener('click', async () => {
      const args = {};
      for (const i of inputs) if (i.value !== '') args[i.name] = i.value;
      use.disabled = true;
      try {
        const j = await postJson('/api/mcp/prompt', { service: p.service, name: p.name, arguments: args });
        input.value = j.text || '';
        form.hidden = true;
        input.focus();
      } catch (err) {
        localError('The prompt "' + p.name + '" could not be used: ' + err.message);
      } finally { use.disabled = false; }
    });
    const cancel = el('button', 'quick-reply', 'Cancel');
    cancel.type = 'button';
    cancel.addEventListener('click', () => { form.hidden = true; });
    row.append(use, cancel);
    form.append(row);
    form.hidden = false;
    if (inputs.length) inputs[0].focus();
  }
  // A resource template: its variables asked for (the server suggests values as they are
  // typed); "Read" has the server make the URI, read it and check it as a message would carry
  // it, then the resource is chosen for the next message like a listed one.
  function templateForm(t) {
    const form = document.getElementById('template-form');
    form.textContent = '';
    form.dataset.template = t.uriTemplate;
    form.append(el('div', 'who', (t.title || t.name) + ' — ' + t.uriTemplate + (t.description ? ' — ' + t.description : '')));
    const inputs = [];
    for (const a of t.arguments || []) {
      const label = el('label', null, a);
      const i = document.createElement('input');
      i.name = a;
      const list = document.createElement('datalist');
      list.id = 'template-complete-' + inputs.length;
      i.setAttribute('list', list.id);
      completes(i, list, { service: t.service, uriTemplate: t.uriTemplate });
      label.append(i, list);
      form.append(label);
      inputs.push(i);
    }
    const preview = el('pre', 'preview');
    preview.hidden = true;
    const row = el('div', 'quick-replies');
    const read = el('button', 'quick-reply read-template', 'Read and attach');
    read.type = 'button';
    read.addEventListener('click', async () => {
      const args = {};
      for (const i of inputs) args[i.name] = i.value;
      read.disabled = true;
      try {
        const j = await postJson('/api/mcp/template', { service: t.service, uriTemplate: t.uriTemplate, arguments: args });
        preview.textContent = j.preview || '';
        preview.hidden = !j.preview;
        form.dataset.read = j.uri;
        if (!chosen.some(c => c.service === t.service && c.uri === j.uri)) {
          if (chosen.length >= MAX_CHOSEN) {
            localError('A message may carry at most ' + MAX_CHOSEN + ' resources: remove one first.');
            return;
          }
          chosen.push({ service: t.service, uri: j.uri, label: j.uri });
          drawChosen();
        }
      } catch (err) {
        localError('The template "' + (t.title || t.name) + '" could not be read: ' + err.message);
      } finally { read.disabled = false; }
    });
    const cancel = el('button', 'quick-reply', 'Close');
    cancel.type = 'button';
    cancel.addEventListener('click', () => { form.hidden = true; });
    row.append(read, cancel);
    form.append(row, preview);
    form.hidden = false;
    if (inputs.length) inputs[0].focus();
  }
  async function loadOffers() {
    let j;
    try {
      const res = await fetch('/api/mcp');
      if (!res.ok) return;
      j = await res.json();
    } catch (_) { return; }
    const rl = document.getElementById('resources');
    const pl = document.getElementById('prompts');
    rl.textContent = ''; pl.textContent = '';
    watched = new Set((j.watched || []).map(w => w.service + ' ' + w.uri));
    for (const r of j.resources || []) {
      const label = r.title || r.name || r.uri;
      const [li, b] = offerButton(label, r.service, r.mimeType);
      b.title = r.uri + (r.description ? ' — ' + r.description : '');
      b.dataset.service = r.service; b.dataset.uri = r.uri;
      b.addEventListener('click', () => {
        if (chosen.some(c => c.service === r.service && c.uri === r.uri)) {
          chosen = chosen.filter(c => !(c.service === r.service && c.uri === r.uri));
        } else if (chosen.length >= MAX_CHOSEN) {
          localError('A message may carry at most ' + MAX_CHOSEN + ' resources: remove one first.');
          return;
        } else chosen.push({ service: r.service, uri: r.uri, label: label });
        drawChosen();
      });
      li.append(watchButton(r.service, r.uri, label));
      rl.append(li);
    }
    const tl = document.getElementById('templates');
    tl.textContent = '';
    for (const t of j.templates || []) {
      const [li, b] = offerButton(t.title || t.name, t.service, t.uriTemplate);
      b.title = t.uriTemplate + (t.description ? ' — ' + t.description : '');
      b.dataset.service = t.service; b.dataset.template = t.uriTemplate;
      b.addEventListener('click', () => templateForm(t));
      tl.append(li);
    }
    for (const p of j.prompts || []) {
      const [li, b] = offerButton(p.title || p.name, p.service, p.description);
      b.dataset.prompt = p.name;
      b.addEventListener('click', () => promptForm(p));
      pl.append(li);
    }
    // The person's switch for learning from their requests, when the tool search learns.
    const lc = j.learning || {};
    document.getElementById('learn-consent').checked = !!lc.consents;
    document.getElementById('learn-consent-row').hidden = !(lc.on && !lc.error);
    drawChosen();
    markUpdated();
    document.getElementById('offers').hidden = false;
    document.body.dataset.offers = '1';
    if (!offersFollower) followOffers();
  }
  // The list kept live: the server says when an MCP server's lists or a subscribed resource
  // changed (`changed` events of /api/mcp/events, at most one a second) and the list is asked
  // again — one listing at a time, one more if a change came meanwhile. A resource that changed
  // is marked until the page is reloaded.
  let offersFollower = null;
  let listing = null;
  let listAgain = false;
  const updated = new Set();
  function markUpdated() {
    for (const b of document.querySelectorAll('#resources button[data-uri]')) {
      const u = updated.has(b.dataset.service + ' ' + b.dataset.uri);
      b.classList.toggle('updated', u);
      if (u) b.dataset.updated = '1'; else delete b.dataset.updated;
    }
  }
  function listOffers() {
    if (listing) { listAgain = true; return; }
    listing = loadOffers().finally(() => {
      listing = null;
      if (listAgain) { listAgain = false; listOffers(); }
    });
  }
  function followOffers() {
    const es = new EventSource('/api/mcp/events');
    offersFollower = es;
    // reconnected by the browser after a break: what changed meanwhile was not heard
    let opened = false;
    es.addEventListener('open', () => { if (opened) listOffers(); opened = true; });
    es.addEventListener('changed', ev => {
      let d;
      try { d = JSON.parse(ev.data); } catch (_) { return; }
      for (const u of (d && d.updated) || []) updated.add(u.service + ' ' + u.uri);
      if (d && Number.isSafeInteger(d.generation)) document.body.dataset.offersGeneration = String(d.generation);
      listOffers();
    });
    es.addEventListener('error', () => {
      if (es.readyState !== EventSource.CLOSED) return;
      offersFollower = null;
      setTimeout(listOffers, 2000);
    });
  }
  // Saying no deletes what was learned from this person's requests (the server answers how
  // many); the switch shows what the server kept.
  document.getElementById('learn-consent').addEventListener('change', async ev => {
    const box = ev.target;
    const want = box.checked;
    box.disabled = true;
    try {
      const j = await postJson('/api/mcp/learning', { consents: want });
      box.checked = !!j.consents;
      document.body.dataset.learnConsent = String(box.checked);
    } catch (err) {
      box.checked = !want;
      localError('Your choice was not kept: ' + err.message);
    } finally {
      box.disabled = false;
    }
  });

  document.getElementById('composer').addEventListener('submit', ev => {
    ev.preventDefault();
    const text = input.value.trim();
    if (!text && !attached && !chosen.length) return;
    const images = attached ? [attached] : [];
    const resources = chosen.map(r => ({ service: r.service, uri: r.uri }));
    input.value = '';
    clearAttached();
    clearChosen();
    send(text, undefined, images, resources);
  });
  input.addEventListener('keydown', ev => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      document.getElementById('composer').requestSubmit();
    }
  });
  // the messages addressed to this person (`person:PRINCIPAL` on the bus): a
  // conversation of theirs the server names
  document.getElementById('inbox').addEventListener('click', async () => {
    const res = await fetch('/api/inbox');
    let j = {};
    try { j = await res.json(); } catch (_) { /* not JSON */ }
    if (res.status === 401 && j.login === '/login') { location.assign('/login'); return; }
    if (!res.ok || !j.sessionId) { setStatus(j.error || ('inbox: HTTP ' + res.status)); return; }
    sid = j.sessionId;
    localStorage.setItem(KEY, sid);
    load();
  });
  document.getElementById('new-chat').addEventListener('click', () => {
    sid = newId();
    localStorage.setItem(KEY, sid);
    load();
  });
  setIdle();
  load();
  loadOffers();
})();
