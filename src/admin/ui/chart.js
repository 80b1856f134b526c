// The outbox charts of the dashboard (GET /ui): events (counts) and ages (seconds), each on a
// scale of its own, so a flat line of one is never hidden under the other. The ticks are round
// steps (1, 2 or 5 times a power of ten, in seconds, minutes or hours for the ages), never
// repeated: the labels drawn are also left on the canvas as data-ticks, for the tests.
'use strict';

// A round step (1, 2 or 5 times a power of ten) of at least raw, and at least 1: counts are
// whole, and ages are shown in a unit that makes them 3 or more (ageUnit).
function niceStep(raw) {
  const r = Math.max(raw, 1);
  const p = Math.pow(10, Math.floor(Math.log10(r)));
  for (const f of [1, 2, 5, 10]) if (f * p >= r) return f * p;
  return 10 * p;
}

// Ticks 0, step, 2 step, ... up to at least max, about four of them.
function ticks(max) {
  const step = niceStep(max / 4);
  const top = Math.max(step, Math.ceil(max / step) * step);
  const out = [];
  for (let v = 0; v <= top + step / 2; v += step) out.push(v);
  return out;
}

// The unit for ages up to maxS seconds: seconds, minutes or hours.
function ageUnit(maxS) {
  if (maxS >= 3 * 3600) return {div: 3600, name: 'h'};
  if (maxS >= 3 * 60) return {div: 60, name: 'min'};
  return {div: 1, name: 's'};
}

function tickLabel(v, unit) {
  return unit ? v + ' ' + unit : String(v);
}

// Draws series ({value, color, dashed}) of points on canvas with the scale in its ticks; unit names
// what the values are counted in ('' for counts).
function drawSeries(canvas, points, series, scale, unit) {
  const ctx = canvas.getContext('2d');
  const w = canvas.width;
  const h = canvas.height;
  const pad = {l: 64, r: 12, t: 10, b: 22};
  ctx.clearRect(0, 0, w, h);
  ctx.font = '12px system-ui, sans-serif';
  const top = scale[scale.length - 1];
  const y = (v) => h - pad.b - ((h - pad.t - pad.b) * Math.min(v, top)) / top;
  const labels = [];
  for (const v of scale) {
    ctx.strokeStyle = '#dde';
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(pad.l, y(v));
    ctx.lineTo(w - pad.r, y(v));
    ctx.stroke();
    const label = tickLabel(v, unit);
    labels.push(label);
    ctx.fillStyle = '#667';
    ctx.textAlign = 'right';
    ctx.fillText(label, pad.l - 6, y(v) + 4);
  }
  canvas.dataset.ticks = labels.join('|');
  if (points.length < 2) return;
  const t0 = points[0].t;
  const span = Math.max(1, points[points.length - 1].t - t0);
  const x = (t) => pad.l + ((w - pad.l - pad.r) * (t - t0)) / span;
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.lineWidth = 2;
    ctx.setLineDash(s.dashed ? [6, 4] : []); // the second line stays visible on the first
    ctx.beginPath();
    points.forEach((p, i) => {
      if (i === 0) ctx.moveTo(x(p.t), y(s.value(p)));
      else ctx.lineTo(x(p.t), y(s.value(p)));
    });
    ctx.stroke();
  }
  ctx.setLineDash([]);
  ctx.fillStyle = '#667';
  ctx.textAlign = 'left';
  ctx.fillText(new Date(t0).toLocaleTimeString(), pad.l, h - 6);
  ctx.textAlign = 'right';
  ctx.fillText(new Date(points[points.length - 1].t).toLocaleTimeString(), w - pad.r, h - 6);
}

// points: {t, pending, waiting, age, due}, oldest first.
function drawCharts(points) {
  const maxCount = Math.max(0, ...points.map((p) => Math.max(p.pending, p.waiting)));
  drawSeries(document.getElementById('backlog-chart'), points,
             [{value: (p) => p.pending, color: '#2b6cb0'},
              {value: (p) => p.waiting, color: '#805ad5', dashed: true}],
             ticks(maxCount), '');
  const maxAge = Math.max(0, ...points.map((p) => Math.max(p.age, p.due)));
  const unit = ageUnit(maxAge);
  drawSeries(document.getElementById('age-chart'), points,
             [{value: (p) => p.age / unit.div, color: '#dd6b20'},
              {value: (p) => p.due / unit.div, color: '#c53030', dashed: true}],
             ticks(maxAge / unit.div), unit.name);
}
