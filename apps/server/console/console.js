// The live console: a tenant's workstreams with their machine state, a turn's tokens and tool
// calls as they stream, watchdog warnings, a cancel button, and approve/deny buttons for a call
// that waits for a person's approval. Events are read with fetch
// streaming (EventSource cannot send an Authorization header); a dropped stream reconnects with
// Last-Event-ID and misses nothing the replay ring still holds.
const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem('turnwarden-token') ?? '';
let selected;
let stream;

async function api(method, path, body) {
  const res = await fetch(`/v1${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  const data = text === '' ? undefined : JSON.parse(text);
  if (!res.ok)
    throw new Error(data?.error ? `${data.error.code}: ${data.error.message}` : `HTTP ${res.status}`);
  return data;
}

function line(cls, text) {
  const div = document.createElement('div');
  div.className = cls;
  div.textContent = text;
  $('transcript').append(div);
  $('transcript').scrollTop = $('transcript').scrollHeight;
  return div;
}

function warn(text) {
  const div = document.createElement('div');
  div.className = 'warning';
  div.textContent = text;
  $('warnings').append(div);
}

async function refresh() {
  const page = await api('GET', '/workstreams?limit=100');
  const list = $('list');
  list.replaceChildren();
  for (const ws of page.items) {
    const li = document.createElement('li');
    li.dataset.id = ws.workstreamId;
    const status = await api('GET', `/workstreams/${ws.workstreamId}/status`).catch(() => undefined);
    li.innerHTML = '<span class="name"></span><span class="badge"></span>';
    li.querySelector('.name').textContent = ws.workstreamId;
    li.querySelector('.badge').textContent = status?.state ?? ws.status;
    if (ws.workstreamId === selected) li.classList.add('selected');
    li.addEventListener('click', () => select(ws.workstreamId));
    list.append(li);
  }
}

function setState(state) {
  $('machine').textContent = state;
  const badge = document.querySelector(`#list li[data-id="${CSS.escape(selected)}"] .badge`);
  if (badge) badge.textContent = state;
  $('cancel').disabled = state === 'idle' || state === 'closed';
}

/** A call waiting for approval: what it is, and Approve / Deny (each posts the token once). */
function approvalCard(approval) {
  const card = document.createElement('div');
  card.className = 'approval';
  card.dataset.token = approval.token;
  const what = document.createElement('span');
  what.textContent = `⏸ ${approval.name ?? 'call'}(${approval.arguments ?? ''}) needs your approval `;
  const approve = document.createElement('button');
  approve.type = 'button';
  approve.className = 'approve';
  approve.textContent = 'Approve';
  const deny = document.createElement('button');
  deny.type = 'button';
  deny.className = 'deny';
  deny.textContent = 'Deny';
  const decide = async (approved) => {
    approve.disabled = true;
    deny.disabled = true;
    try {
      await api('POST', `/workstreams/${selected}/${approved ? 'approve' : 'deny'}`, {
        token: approval.token,
        ...(approved ? {} : { reason: 'denied in the console' }),
      });
      what.textContent = `${approved ? '✓ approved' : '✗ denied'}: ${approval.name ?? 'call'} `;
    } catch (err) {
      warn(String(err.message));
    }
  };
  approve.addEventListener('click', () => void decide(true));
  deny.addEventListener('click', () => void decide(false));
  card.append(what, approve, deny);
  $('transcript').append(card);
  $('transcript').scrollTop = $('transcript').scrollHeight;
}

let assistant;
function onEvent(e) {
  switch (e.type) {
    case 'message': {
      const m = e.data.message;
      if (m.role === 'user') line('user', `user (${m.principal ?? '?'}): ${m.content}`);
      else if (m.role === 'tool')
        line(
          'tool',
          `  ↳ ${m.name} → ${m.content}${m.synthesized ? ` [synthesized, effect ${m.effect}]` : ''}`,
        );
      else if (m.role === 'system') line('system', `system: ${m.content}`);
      break;
    }
    case 'turn_started':
      assistant = line('assistant', 'assistant: ');
      break;
    case 'token':
      assistant ??= line('assistant', 'assistant: ');
      assistant.textContent += e.data.text;
      break;
    case 'tool_started':
      line('tool', `  ⚙ ${e.data.name} (call ${e.data.id}) started`);
      assistant = undefined;
      break;
    case 'state':
      setState(e.data.state);
      break;
    case 'warning':
      warn(e.data.message);
      break;
    case 'turn_aborted':
      warn(`Turn ${e.generation} aborted (${e.data.reason})`);
      break;
    case 'approval_requested':
      approvalCard(e.data);
      assistant = undefined;
      break;
    case 'stream_end':
      line('system', `— turn ${e.generation} ${e.data.status} —`);
      assistant = undefined;
      break;
    case 'idle':
      setState('idle');
      break;
    case 'ws_closed':
      setState('closed');
      break;
    default:
      break;
  }
}

/**
 * Follows a workstream's events: first exactly after a history read (its handoff token, E2);
 * after a dropped connection, from the last event seen (Last-Event-ID, E1).
 */
function follow(id, handoff) {
  const controller = new AbortController();
  let lastEventId;
  const run = async () => {
    while (!controller.signal.aborted) {
      try {
        const query = lastEventId === undefined ? `?handoff=${encodeURIComponent(handoff)}` : '';
        const res = await fetch(`/v1/workstreams/${id}/events${query}`, {
          headers: {
            authorization: `Bearer ${token}`,
            accept: 'text/event-stream',
            ...(lastEventId === undefined ? {} : { 'last-event-id': String(lastEventId) }),
          },
          signal: controller.signal,
        });
        if (!res.ok) return;
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let end = buf.indexOf('\n\n');
          while (end >= 0) {
            const block = buf.slice(0, end);
            buf = buf.slice(end + 2);
            const data = block.split('\n').find((l) => l.startsWith('data: '));
            if (data) {
              const event = JSON.parse(data.slice(6));
              lastEventId = event.id;
              onEvent(event);
            }
            end = buf.indexOf('\n\n');
          }
        }
      } catch {
        if (controller.signal.aborted) return;
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  };
  void run();
  return controller;
}

async function select(id) {
  selected = id;
  stream?.abort();
  $('title').textContent = id;
  $('transcript').replaceChildren();
  $('warnings').replaceChildren();
  // A page at a time (each page is one read on the server's thread); the last page's handoff
  // continues after all of them (E2).
  let page = await api('GET', `/workstreams/${id}/history?limit=500`);
  for (;;) {
    for (const row of page.rows) onEvent({ type: 'message', data: { message: row.message } });
    if (page.nextCursor === undefined) break;
    page = await api('GET', `/workstreams/${id}/history?cursor=${encodeURIComponent(page.nextCursor)}`);
  }
  const { handoff } = page;
  const status = await api('GET', `/workstreams/${id}/status`);
  setState(status.state);
  // Opened while a call waits for approval (its event is in the past): the card all the same.
  if (status.awaitingApproval) approvalCard(status.awaitingApproval);
  stream = follow(id, handoff);
  $('message').disabled = false;
  $('send').disabled = false;
  for (const li of document.querySelectorAll('#list li'))
    li.classList.toggle('selected', li.dataset.id === id);
}

$('login').addEventListener('submit', async (e) => {
  e.preventDefault();
  token = $('token').value.trim();
  sessionStorage.setItem('turnwarden-token', token);
  try {
    await refresh();
    $('who').textContent = 'connected';
    $('create').disabled = false;
    $('refresh').disabled = false;
  } catch (err) {
    $('who').textContent = String(err.message);
  }
});
$('create').addEventListener('click', async () => {
  const ws = await api('POST', '/workstreams', {});
  await refresh();
  await select(ws.workstreamId);
});
$('refresh').addEventListener('click', () => void refresh());
$('composer').addEventListener('submit', async (e) => {
  e.preventDefault();
  const content = $('message').value;
  if (!selected || content.trim() === '') return;
  try {
    await api('POST', `/workstreams/${selected}/messages`, { content });
    $('message').value = '';
  } catch (err) {
    warn(String(err.message));
  }
});
$('cancel').addEventListener('click', async () => {
  if (selected)
    await api('POST', `/workstreams/${selected}/cancel`).catch((err) => warn(String(err.message)));
});
if (token) $('token').value = token;
