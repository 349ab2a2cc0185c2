package bench

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Table is one section of the report.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
	Notes  []string // said under the table
}

// Bar is one bar of a chart: a label and a sample in Unit.
type Bar struct {
	Label string
	S     Summary
}

// Panel is one bar chart of the image.
type Panel struct {
	Title string
	Unit  string
	Bars  []Bar
}

// Report is a whole run.
type Report struct {
	Title  string
	Intro  []string
	Tables []Table
	Panels []Panel
}

// WriteText prints the tables with aligned columns (for the terminal).
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "%s\n", r.Title)
	for _, l := range r.Intro {
		fmt.Fprintf(w, "%s\n", l)
	}
	for _, t := range r.Tables {
		fmt.Fprintf(w, "\n== %s\n", t.Title)
		widths := make([]int, len(t.Header))
		for _, row := range append([][]string{t.Header}, t.Rows...) {
			for i, c := range row {
				widths[i] = max(widths[i], utf8.RuneCountInString(c))
			}
		}
		for _, row := range append([][]string{t.Header}, t.Rows...) {
			cells := make([]string, len(row))
			for i, c := range row {
				cells[i] = c + strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			}
			fmt.Fprintf(w, "  %s\n", strings.TrimRight(strings.Join(cells, "  "), " "))
		}
		for _, n := range t.Notes {
			fmt.Fprintf(w, "  * %s\n", n)
		}
	}
}

// WriteMarkdown writes the report as markdown, the chart image linked as chart.
func (r *Report) WriteMarkdown(w io.Writer, chart string) {
	fmt.Fprintf(w, "# %s\n\n", r.Title)
	for _, l := range r.Intro {
		fmt.Fprintf(w, "%s\n", l)
	}
	if chart != "" {
		fmt.Fprintf(w, "\n![chart](%s)\n", chart)
	}
	for _, t := range r.Tables {
		fmt.Fprintf(w, "\n## %s\n\n", t.Title)
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(t.Header, " | "), strings.Repeat(" --- |", len(t.Header)))
		for _, row := range t.Rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(escape(row), " | "))
		}
		if len(t.Notes) > 0 {
			fmt.Fprintln(w)
		}
		for _, n := range t.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
}

func escape(row []string) []string {
	out := make([]string, len(row))
	for i, c := range row {
		out[i] = strings.ReplaceAll(c, "|", `\|`)
	}
	return out
}
