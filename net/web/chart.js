// chart.js - a small live line chart in SVG, no library: the last n
// samples of one figure, the newest at the right edge, scaled to the
// largest one shown. Its colours come from the style sheet (classes, not
// attributes), so it follows light and dark; it stretches to its box, so
// it fits a narrow window. Nothing here reads text into markup.
'use strict';

const ParleyChart = (() => {
  const NS = 'http://www.w3.org/2000/svg';
  const W = 240;
  const H = 48;

  function svg(tag, attrs) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  }

  // A chart appended to parent, keeping n samples; cls names the series
  // (for its colour). push(v) adds a sample and draws.
  function create(parent, n, cls) {
    const root = svg('svg', {viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none',
      class: 'spark ' + cls, role: 'img'});
    const area = svg('path', {class: 'area'});
    const line = svg('polyline', {class: 'line', 'vector-effect': 'non-scaling-stroke'});
    root.append(area, line);
    parent.append(root);
    const values = [];

    function draw() {
      const max = Math.max(1, ...values);
      const step = W / (n - 1);
      const x0 = W - (values.length - 1) * step;
      const pts = values.map((v, i) =>
        (x0 + i * step).toFixed(1) + ',' + (H - 1 - (v / max) * (H - 4)).toFixed(1));
      line.setAttribute('points', pts.join(' '));
      area.setAttribute('d', pts.length > 1
        ? `M${x0.toFixed(1)},${H} L${pts.join(' L')} L${W},${H} Z` : '');
      root.dataset.points = String(values.length);
      root.dataset.max = String(Math.max(0, ...values)); // the scale's top
      root.setAttribute('aria-label', `the last ${values.length} s, at most ${root.dataset.max}`);
    }

    return {
      push(v) {
        values.push(Number.isFinite(v) ? Math.max(0, v) : 0);
        if (values.length > n) values.shift();
        draw();
      },
      peak: () => Math.max(0, ...values),
    };
  }

  return {create};
})();
