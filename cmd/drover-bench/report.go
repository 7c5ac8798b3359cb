package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// targets checks the rows against the performance targets and says, per
// target, the figure measured and whether it holds.
func targets(rows []row) string {
	var b strings.Builder
	b.WriteString("\n**Targets** (each against figures of this run):\n\n")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	find := func(n int, lat time.Duration) *row {
		for i := range rows {
			if rows[i].groups == n && rows[i].latency == lat {
				return &rows[i]
			}
		}
		return nil
	}
	for _, r := range rows {
		if r.latency == 0 && r.groups >= 1000 && r.sequential > 0 {
			x := float64(r.sequential) / float64(r.measured)
			fmt.Fprintf(&b, "- %d groups at 0 ms at least as fast as the sequential loop: %.2f× — %s\n", r.groups, x, verdict(x >= 1))
		}
	}
	if r := find(5000, 0); r != nil {
		fmt.Fprintf(&b, "- 5,000 groups at 0 ms in 3 s or less: %v — %s\n", ms(r.measured), verdict(r.measured <= 3*time.Second))
	}
	if r := find(1, 0); r != nil {
		where := fmt.Sprintf("one workflow task, no turn through the server between steps; its steps took %v", ms(r.rto))
		if r.tasks > 1 {
			where = fmt.Sprintf("%d workflow tasks, a median of %v apart: %v of turns through the server", r.tasks, ms(r.turn), ms(time.Duration(r.tasks-1)*r.turn))
		}
		fmt.Fprintf(&b, "- one group at 0 ms in 100 ms or less: %v — %s (%s; a workflow that does nothing takes %v here)\n",
			ms(r.measured), verdict(r.measured <= 100*time.Millisecond), where, ms(r.empty))
	}
	for _, t := range []struct {
		n     int
		bound float64
	}{{100, 1.10}, {1000, 1.05}, {5000, 1.05}} {
		if r := find(t.n, 50*time.Millisecond); r != nil {
			x := float64(r.measured) / float64(r.design())
			fmt.Fprintf(&b, "- %d groups at 50 ms within %.2f of the design's path: %.3f (%v against %v) — %s",
				t.n, t.bound, x, ms(r.measured), ms(r.design()), verdict(x <= t.bound))
			if r.direct > 0 {
				fmt.Fprintf(&b, "; the same path run directly took %v (%.3f of the design's), Drover %.3f of that", ms(r.direct),
					float64(r.direct)/float64(r.design()), float64(r.measured)/float64(r.direct))
				if r.empty > 0 {
					fmt.Fprintf(&b, "; direct plus one workflow that does nothing (%v): %.3f of the design's", ms(r.empty),
						float64(r.direct+r.empty)/float64(r.design()))
				}
				if r.empty > 0 && r.checks > 0 && r.settle > 0 {
					// The floor the design sets: the two turns it puts
					// before the first side effect, as this failover took
					// them.
					floor := r.direct + r.empty + r.checks + r.settle
					fmt.Fprintf(&b, "; the design's turns before the first side effect, from this failover's history: the plan's signature and version check with its record (%v) and the settle that ends the checks' task (%v); direct plus them and the workflow that does nothing: %.3f of direct, Drover %.3f of that",
						ms(r.checks), ms(r.settle), float64(floor)/float64(r.direct), float64(r.measured)/float64(floor))
				}
				if r.checks > 0 && r.shaped > 0 {
					// Every turn this failover took, carrying what it
					// carried, without its calls.
					floor := r.direct + r.checks + r.shaped
					fmt.Fprintf(&b, "; direct plus the check with the record and a workflow taking this failover's own turns, carrying what it carried (its input, its tasks' markers, timers and activities, its record's changes, its result), without a storage call (%v): %.3f of direct, Drover %.3f of that",
						ms(r.shaped), float64(floor)/float64(r.direct), float64(r.measured)/float64(floor))
				}
			}
			b.WriteString("\n")
		}
	}
	// An action records a fixed number of events for its steps whatever
	// the plan's size (those of the smallest plan measured); the target is
	// on what each group adds.
	var fixed int64
	if len(rows) > 0 {
		small := slices.MinFunc(rows, func(a, b row) int { return a.groups - b.groups })
		fixed = small.events
	}
	worst, worstAt, warned := 0.0, 0, 0
	for _, r := range rows {
		if r.groups >= 10 {
			if x := float64(r.events-fixed) / float64(r.groups); x >= worst {
				worst, worstAt = x, r.groups
			}
		}
		warned += r.warnings
	}
	if worstAt > 0 {
		fmt.Fprintf(&b, "- at most 2 history events per group and action, beyond the %d of the action's fixed steps: at most %.3f (at %d groups) — %s\n",
			fixed, worst, worstAt, verdict(worst <= 2))
	}
	if len(rows) > 0 {
		fmt.Fprintf(&b, "- no history or payload size warning from the server: %d — %s\n", warned, verdict(warned == 0))
	}
	for _, r := range rows {
		if r.groups != 20000 {
			continue
		}
		if base := find(5000, r.latency); base != nil {
			x := float64(r.measured) / float64(base.measured)
			fmt.Fprintf(&b, "- 20,000 groups at %v within 4.5× the 5,000-group time: %.2f× (%v against %v) — %s",
				r.latency, x, ms(r.measured), ms(base.measured), verdict(x <= 4.5))
			if r.direct > 0 && base.direct > 0 {
				// The storage's own growth: the same path run directly.
				fmt.Fprintf(&b, "; the same path run directly: %.2f× (%v against %v)",
					float64(r.direct)/float64(base.direct), ms(r.direct), ms(base.direct))
			}
			b.WriteString("\n")
		}
	}
	if r := find(5000, 0); r != nil {
		fmt.Fprintf(&b, "- worker peak RSS at 5,000 groups 100 MiB or less: %d MiB — %s\n", r.peakRSS>>20, verdict(r.peakRSS <= 100<<20))
	}
	return b.String()
}

// chart draws failover time against plan size, log-log, one panel per
// latency: measured, ideal, sequential and direct; and, with site rows,
// a panel of the site failover's time against its plans, measured and
// direct, a line per store and plans at once. Self-contained SVG.
func chart(rows []row, sites []siteRow) string {
	var lats []time.Duration
	for _, r := range rows {
		if !slices.Contains(lats, r.latency) {
			lats = append(lats, r.latency)
		}
	}
	slices.Sort(lats)
	const pw, ph, left, top, gap = 420, 300, 70, 40, 40
	panels := len(lats)
	if len(sites) > 0 {
		panels++
	}
	width := left + panels*(pw+gap)
	height := top + ph + 70
	if n := len(siteLines(sites)); n > 2 {
		height += 16 * ((n + 1) / 2)
	}
	minN, maxN := math.Inf(1), 0.0
	minT, maxT := math.Inf(1), 0.0
	for _, r := range rows {
		minN, maxN = math.Min(minN, float64(r.groups)), math.Max(maxN, float64(r.groups))
		for _, d := range []time.Duration{r.measured, r.ideal, r.sequential, r.direct} {
			if d > 0 {
				minT, maxT = math.Min(minT, d.Seconds()), math.Max(maxT, d.Seconds())
			}
		}
	}
	if maxN <= minN {
		maxN = minN * 10
	}
	lo, hi := math.Floor(math.Log10(minT)), math.Ceil(math.Log10(maxT))
	if hi <= lo {
		hi = lo + 1
	}
	nlo, nhi := math.Floor(math.Log10(minN)), math.Ceil(math.Log10(maxN))
	if nhi <= nlo {
		nhi = nlo + 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	series := []struct {
		name, color string
		dash        string
		get         func(row) time.Duration
	}{
		{"measured", "#1f77b4", "", func(r row) time.Duration { return r.measured }},
		{"ideal", "#2ca02c", "6,4", func(r row) time.Duration { return r.ideal }},
		{"sequential", "#d62728", "2,3", func(r row) time.Duration { return r.sequential }},
		{"direct", "#9467bd", "8,3,2,3", func(r row) time.Duration { return r.direct }},
	}
	for i, lat := range lats {
		x0 := float64(left + i*(pw+gap))
		px := func(n float64) float64 { return x0 + (math.Log10(n)-nlo)/(nhi-nlo)*pw }
		py := func(t float64) float64 { return float64(top+ph) - (math.Log10(t)-lo)/(hi-lo)*ph }
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" font-weight="bold">plugin latency %v</text>`+"\n", x0, top-15, lat)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, top, pw, ph)
		for e := nlo; e <= nhi; e++ {
			x := px(math.Pow(10, e))
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
				x, top, x, top+ph, x, top+ph+16, count(math.Pow(10, e)))
		}
		for e := lo; e <= hi; e++ {
			y := py(math.Pow(10, e))
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n",
				x0, y, x0+pw, y, x0-4, y+4, seconds(math.Pow(10, e)))
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">volume groups</text>`+"\n", x0+pw/2, top+ph+34)
		for _, s := range series {
			var pts []string
			for _, r := range rows {
				if r.latency != lat || s.get(r) <= 0 {
					continue
				}
				x, y := px(float64(r.groups)), py(s.get(r).Seconds())
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s, %d groups: %v</title></circle>`+"\n", x, y, s.color, s.name, r.groups, ms(s.get(r)))
			}
			if len(pts) > 1 {
				fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`+"\n", strings.Join(pts, " "), s.color, s.dash)
			}
		}
	}
	if len(lats) > 0 {
		for i, s := range series {
			x := left + i*130
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="%s"/><text x="%d" y="%d">%s</text>`+"\n",
				x, height-12, x+30, height-12, s.color, s.dash, x+36, height-8, s.name)
		}
	}
	if len(sites) > 0 {
		sitePanel(&b, sites, float64(left+len(lats)*(pw+gap)), top, pw, ph)
	}
	fmt.Fprintf(&b, `<text x="8" y="%d" transform="rotate(-90 8 %d)" text-anchor="middle">failover time</text>`+"\n", top+ph/2, top+ph/2)
	b.WriteString("</svg>\n")
	return b.String()
}

// siteLine is one line of the site panel: a store at a number of plans
// at once.
type siteLine struct {
	store  string
	atOnce int
}

// siteLines are the site panel's lines, in the rows' order.
func siteLines(sites []siteRow) []siteLine {
	var out []siteLine
	for _, r := range sites {
		l := siteLine{r.store, r.atOnce}
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// sitePanel draws the site failover's time against its plans, log-log:
// per store and plans at once, measured (solid) and the plain program
// (dashed) in one colour, with its legend below the panel.
func sitePanel(b *strings.Builder, sites []siteRow, x0 float64, top, pw, ph int) {
	minN, maxN := math.Inf(1), 0.0
	minT, maxT := math.Inf(1), 0.0
	for _, r := range sites {
		minN, maxN = math.Min(minN, float64(r.plans)), math.Max(maxN, float64(r.plans))
		for _, d := range []time.Duration{r.measured, r.direct} {
			if d > 0 {
				minT, maxT = math.Min(minT, d.Seconds()), math.Max(maxT, d.Seconds())
			}
		}
	}
	lo, hi := math.Floor(math.Log10(minT)), math.Ceil(math.Log10(maxT))
	if hi <= lo {
		hi = lo + 1
	}
	nlo, nhi := math.Floor(math.Log10(minN)), math.Ceil(math.Log10(maxN))
	if nhi <= nlo {
		nhi = nlo + 1
	}
	px := func(n float64) float64 { return x0 + (math.Log10(n)-nlo)/(nhi-nlo)*float64(pw) }
	py := func(t float64) float64 { return float64(top+ph) - (math.Log10(t)-lo)/(hi-lo)*float64(ph) }
	title := "site failover"
	if r := sites[0]; r.groups > 0 {
		title = fmt.Sprintf("site failover: %d groups a plan, %d tiers, %v", r.groups, r.tiers, r.latency)
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%d" font-weight="bold">%s</text>`+"\n", x0, top-15, title)
	fmt.Fprintf(b, `<rect x="%.0f" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, top, pw, ph)
	for e := nlo; e <= nhi; e++ {
		x := px(math.Pow(10, e))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
			x, top, x, top+ph, x, top+ph+16, count(math.Pow(10, e)))
	}
	for e := lo; e <= hi; e++ {
		y := py(math.Pow(10, e))
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			x0, y, x0+float64(pw), y, x0-4, y+4, seconds(math.Pow(10, e)))
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%d" text-anchor="middle">plans</text>`+"\n", x0+float64(pw)/2, top+ph+34)
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"}
	for i, l := range siteLines(sites) {
		color := colors[i%len(colors)]
		name := fmt.Sprintf("%s, %d at once", map[string]string{storeDev: "dev server", storeSQL: "PostgreSQL"}[l.store], l.atOnce)
		for _, s := range []struct {
			what, dash string
			get        func(siteRow) time.Duration
		}{{"measured", "", func(r siteRow) time.Duration { return r.measured }}, {"direct", "6,4", func(r siteRow) time.Duration { return r.direct }}} {
			var pts []string
			for _, r := range sites {
				if r.store != l.store || r.atOnce != l.atOnce || s.get(r) <= 0 {
					continue
				}
				x, y := px(float64(r.plans)), py(s.get(r).Seconds())
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
				fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s, %s, %d plans: %v</title></circle>`+"\n", x, y, color, s.what, name, r.plans, ms(s.get(r)))
			}
			if len(pts) > 1 {
				fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`+"\n", strings.Join(pts, " "), color, s.dash)
			}
		}
		lx, ly := x0+float64(i%2)*210, top+ph+50+16*(i/2)
		fmt.Fprintf(b, `<line x1="%.0f" y1="%d" x2="%.0f" y2="%d" stroke="%s" stroke-width="2"/><text x="%.0f" y="%d">%s</text>`+"\n",
			lx, ly, lx+24, ly, color, lx+30, ly+4, name)
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%d" fill="#555">solid: measured; dashed: the plain program (direct)</text>`+"\n",
		x0, top+ph+50+16*((len(siteLines(sites))+1)/2))
}

func count(n float64) string {
	if n >= 1000 {
		return fmt.Sprintf("%gk", n/1000)
	}
	return fmt.Sprintf("%g", n)
}

func seconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%g ms", s*1000)
	}
	return fmt.Sprintf("%g s", s)
}
