#!/usr/bin/python3
"""Writes the loss curve of a training run (train_log.json) as an SVG line chart (main and MTP losses,
log scale), with no plotting library: usage plot_loss.py MODEL_DIR/train_log.json OUT.svg"""
import json
import math
import sys


def main():
    log = json.load(open(sys.argv[1]))["log"]
    series = {"main": [(r["step"], r["loss_main"]) for r in log]}
    for d in range(len(log[0]["loss_mtp"])):
        series["mtp depth %d" % (d + 1)] = [(r["step"], r["loss_mtp"][d]) for r in log]
    W, H, L, B = 640, 360, 60, 40
    max_step = max(s for s, _ in series["main"])
    lo, hi = math.log10(1e-3), math.log10(10)

    def xy(step, loss):
        x = L + (W - L - 20) * step / max_step
        y = 20 + (H - 20 - B) * (hi - math.log10(max(loss, 1e-3))) / (hi - lo)
        return "%.1f,%.1f" % (x, y)

    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="11">' % (W, H), '<rect width="100%" height="100%" fill="white"/>']
    for e in range(-3, 2):
        y = xy(0, 10 ** e).split(",")[1]
        out.append('<line x1="%d" x2="%d" y1="%s" y2="%s" stroke="#ddd"/>' % (L, W - 20, y, y))
        out.append('<text x="%d" y="%s" text-anchor="end">1e%d</text>' % (L - 5, y, e))
    for i, (name, pts) in enumerate(series.items()):
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.2" points="%s"/>'
                   % (colors[i % len(colors)], " ".join(xy(s, v) for s, v in pts)))
        out.append('<text x="%d" y="%d" fill="%s">%s</text>' % (W - 150, 30 + 14 * i, colors[i % len(colors)], name))
    out.append('<text x="%d" y="%d" text-anchor="middle">step (max %d)</text>' % ((W + L) // 2, H - 10, max_step))
    out.append('<text x="15" y="%d" transform="rotate(-90 15 %d)" text-anchor="middle">cross-entropy (log)</text>'
               % (H // 2, H // 2))
    out.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
