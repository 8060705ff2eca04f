// goinfo BINARY: what a Go-wait tracer needs from a Go binary, stripped or not.
package main

import (
	"bytes"
	"debug/buildinfo"
	"debug/dwarf"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
)

type out struct {
	GoVersion   string            `json:"go_version"`
	SymSource   string            `json:"sym_source"`
	Funcs       map[string][2]uint64 `json:"funcs"` // name -> [vaddr, file offset]
	GOffsets    map[string]int64  `json:"g_offsets,omitempty"`
	GOffSource  string            `json:"g_offsets_source"`
	WaitReasons []string          `json:"wait_reasons,omitempty"`
	WRSource    string            `json:"wait_reasons_source"`
}

func fileOff(f *elf.File, va uint64) uint64 {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && va >= p.Vaddr && va < p.Vaddr+p.Filesz {
			return va - p.Vaddr + p.Off
		}
	}
	return 0
}

func readVA(f *elf.File, va uint64, n int) []byte {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOBITS && va >= s.Addr && va+uint64(n) <= s.Addr+s.Size {
			b := make([]byte, n)
			s.ReadAt(b, int64(va-s.Addr))
			return b
		}
	}
	return nil
}

func main() {
	path := os.Args[1]
	f, err := elf.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	o := out{Funcs: map[string][2]uint64{}}
	if bi, err := buildinfo.ReadFile(path); err == nil {
		o.GoVersion = bi.GoVersion
	}
	want := []string{"runtime.gopark", "runtime.goready", "runtime.ready", "runtime.execute",
		"runtime.casgstatus", "runtime.park_m", "runtime.mcall", "runtime.goexit", "main.markWindow"}
	// 1. symbols: ELF symtab if present, else pclntab (survives -s -w)
	var dataSyms = map[string]elf.Symbol{}
	if syms, err := f.Symbols(); err == nil && len(syms) > 0 {
		o.SymSource = "symtab"
		for _, s := range syms {
			for _, w := range want {
				if s.Name == w {
					o.Funcs[w] = [2]uint64{s.Value, fileOff(f, s.Value)}
				}
			}
			if s.Name == "runtime.waitReasonStrings" {
				dataSyms[s.Name] = s
			}
		}
	} else {
		o.SymSource = "gopclntab"
		sec := f.Section(".gopclntab")
		text := f.Section(".text")
		if sec != nil && text != nil {
			data, _ := sec.Data()
			// Go >= 1.20 pclntab magic 0xfffffff1 has the 1.18 layout; Go 1.19's debug/gosym only knows 0xfffffff0
			if len(data) > 4 && binary.LittleEndian.Uint32(data) == 0xfffffff1 {
				data = append([]byte(nil), data...)
				binary.LittleEndian.PutUint32(data, 0xfffffff0)
			}
			lt := gosym.NewLineTable(data, text.Addr)
			tab, err := gosym.NewTable(nil, lt)
			if err == nil {
				for _, w := range want {
					if fn := tab.LookupFunc(w); fn != nil {
						o.Funcs[w] = [2]uint64{fn.Entry, fileOff(f, fn.Entry)}
					}
				}
			} else {
				o.SymSource = "gopclntab: " + err.Error()
			}
		}
	}
	// 2. g struct offsets from DWARF (absent with -w)
	if d, err := f.DWARF(); err == nil {
		o.GOffSource = "dwarf"
		r := d.Reader()
		for {
			e, err := r.Next()
			if err != nil || e == nil {
				break
			}
			if e.Tag == dwarf.TagStructType && e.Val(dwarf.AttrName) == "runtime.g" {
				o.GOffsets = map[string]int64{}
				for {
					c, _ := r.Next()
					if c == nil || c.Tag == 0 {
						break
					}
					if c.Tag == dwarf.TagMember {
						name, _ := c.Val(dwarf.AttrName).(string)
						switch name {
						case "goid", "atomicstatus", "waitreason", "m", "sched", "waitsince", "labels", "startpc", "gopc":
							if off, ok := c.Val(dwarf.AttrDataMemberLoc).(int64); ok {
								o.GOffsets[name] = off
							}
						}
					}
				}
				break
			}
		}
	} else {
		o.GOffSource = "none (no DWARF: use a per-Go-version table keyed by " + o.GoVersion + ")"
	}
	// 3. waitReason strings: symbol if present, else scan data for the string-header table
	var tab uint64
	if s, ok := dataSyms["runtime.waitReasonStrings"]; ok {
		tab = s.Value
		o.WRSource = "symtab runtime.waitReasonStrings"
	} else {
		// find "GC assist marking" in rodata, then a {ptr,17} header preceded by {x,0}
		needle := []byte("GC assist marking")
		var cands []uint64
		for _, s := range f.Sections {
			if s.Name == ".rodata" {
				b, _ := s.Data()
				for i := 0; ; {
					j := bytes.Index(b[i:], needle)
					if j < 0 {
						break
					}
					cands = append(cands, s.Addr+uint64(i+j))
					i += j + 1
				}
			}
		}
		for _, s := range f.Sections {
			if s.Name != ".data" && s.Name != ".noptrdata" && s.Name != ".data.rel.ro" {
				continue
			}
			b, _ := s.Data()
			for i := 16; i+16 <= len(b) && tab == 0; i += 8 {
				p := binary.LittleEndian.Uint64(b[i:])
				l := binary.LittleEndian.Uint64(b[i+8:])
				if l != 17 {
					continue
				}
				for _, c := range cands {
					if p == c && binary.LittleEndian.Uint64(b[i-8:]) == 0 {
						tab = s.Addr + uint64(i-16)
						o.WRSource = "heuristic scan of " + s.Name
					}
				}
			}
		}
	}
	if tab != 0 {
		for i := 0; i < 64; i++ {
			h := readVA(f, tab+uint64(16*i), 16)
			if h == nil {
				break
			}
			p, l := binary.LittleEndian.Uint64(h), binary.LittleEndian.Uint64(h[8:])
			if i > 0 && (l == 0 || l > 64) {
				break
			}
			s := ""
			if l > 0 {
				b := readVA(f, p, int(l))
				if b == nil {
					break
				}
				s = string(b)
			}
			o.WaitReasons = append(o.WaitReasons, s)
		}
	}
	e := json.NewEncoder(os.Stdout)
	e.SetIndent("", " ")
	e.Encode(o)
}
