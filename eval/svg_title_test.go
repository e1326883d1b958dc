package eval

import (
	"bytes"
	"encoding/xml"
	"strconv"
	"testing"
)

// TestSVGTitlesFit checks that every panel's title lines end inside their panel, the last panel's included (its
// right edge is the image's), with a generous estimate of the text's width (0.62 em a character, bold included).
func TestSVGTitlesFit(t *testing.T) {
	_, groups := readFixture(t)
	rep := &Report{}
	for _, g := range groups {
		rep.Items = append(rep.Items, g...)
	}
	rep.summarize()
	for typ, m := range rep.Types {
		m.N = 123456 // a count of six digits: a long title
		rep.Types[typ] = m
	}
	var buf bytes.Buffer
	if err := rep.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Panels []struct {
			Texts []struct {
				Class string `xml:"class,attr"`
				X     string `xml:"x,attr"`
				Size  string `xml:"font-size,attr"`
				Text  string `xml:",chardata"`
			} `xml:"text"`
		} `xml:"g"`
	}
	if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	titles := 0
	for i, p := range doc.Panels {
		for _, tx := range p.Texts {
			if tx.Class != "title" {
				continue
			}
			titles++
			x, _ := strconv.ParseFloat(tx.X, 64)
			size := 11.0
			if tx.Size != "" {
				size, _ = strconv.ParseFloat(tx.Size, 64)
			}
			if end := x + 0.62*size*float64(len([]rune(tx.Text))); end > float64((i+1)*panelW) {
				t.Errorf("panel %d: title %q ends near x=%.0f, past the panel's edge %d", i, tx.Text, end, (i+1)*panelW)
			}
		}
	}
	if titles != 2*len(doc.Panels) || titles == 0 {
		t.Errorf("%d title lines in %d panels", titles, len(doc.Panels))
	}
}
