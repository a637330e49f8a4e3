package server

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/fswatch"
	"github.com/sluicehq/sluice/settings"
)

// ConfigEvent is one attempt to load configuration: the files read, or the
// error that kept them from being read.
type ConfigEvent struct {
	Files []engine.ConfigFile
	Err   error
	// Applied, when not nil, receives the outcome once the event has been
	// loaded (nil) or rejected (the error): a source that acknowledges
	// configuration upstream (xDS) must not do so before it is in use.
	// It must have room for one value; the server never blocks on it.
	Applied chan<- error
}

// FileSource reads rule files the way the reference's runtime loader does and
// reports every (re)load on a channel.
//
// WatchRoot=true (default): the tree under RUNTIME_ROOT/RUNTIME_SUBDIRECTORY
// is read recursively, each file named by its relative path with '/' → '.',
// and only names starting "config." are rules. A reload happens when the
// RUNTIME_ROOT symlink is swapped. An empty subdirectory means no files (the
// reference's "nil loader").
//
// WatchRoot=false: the files under RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
// RUNTIME_APPDIRECTORY are rules, named by their relative path, and any write,
// create, chmod or remove there reloads them.
type FileSource struct {
	s   settings.ConfigSettings
	log *slog.Logger
}

// NewFileSource checks nothing on disk yet: a missing directory is a load
// error reported on the channel, as in the reference.
// Zero MaxBytes and ReadTimeout take their defaults.
func NewFileSource(s settings.ConfigSettings, log *slog.Logger) *FileSource {
	if s.MaxBytes <= 0 {
		s.MaxBytes = settings.DefaultConfigMaxBytes
	}
	if s.ReadTimeout <= 0 {
		s.ReadTimeout = settings.DefaultConfigReadTimeout
	}
	return &FileSource{s: s, log: log}
}

// dir is the directory whose files are read.
func (f *FileSource) dir() string {
	if f.s.WatchRoot {
		return filepath.Join(f.s.RuntimeRoot, f.s.Subdirectory)
	}
	return filepath.Join(f.s.RuntimeRoot, f.s.Subdirectory, f.s.AppDirectory)
}

// Load reads the files once: regular files only (a FIFO, socket or device
// is skipped with a warning: opening or reading one could block for
// good), all of them together at most MaxBytes, within ReadTimeout.
// Beyond either bound the load fails and the rules in use stay.
func (f *FileSource) Load() ([]engine.ConfigFile, error) {
	if f.s.WatchRoot && f.s.Subdirectory == "" {
		f.log.Warn("no runtime configuration. using nil loader.")
		return nil, nil
	}
	root := f.dir()
	var files []engine.ConfigFile
	rd := &ruleReader{left: f.s.MaxBytes, deadline: time.Now().Add(f.s.ReadTimeout), max: f.s.MaxBytes, log: f.log}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && f.s.IgnoreDotFiles && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if f.s.IgnoreDotFiles && strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		name := strings.ReplaceAll(filepath.ToSlash(rel), "/", ".")
		if f.s.WatchRoot && !strings.HasPrefix(name, "config.") {
			return nil
		}
		data, ok, err := rd.read(path)
		if err != nil || !ok {
			return err
		}
		files = append(files, engine.ConfigFile{Name: name, YAML: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading runtime configuration under %s: %w", root, err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files, nil
}

// Run sends the first load at once, then one per change, until ctx ends.
// The channel is closed when Run returns.
func (f *FileSource) Run(ctx context.Context, out chan<- ConfigEvent) error {
	defer close(out)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching configuration: %w", err)
	}
	defer w.Close()

	root := filepath.Clean(f.s.RuntimeRoot)
	var dw *dirWatch
	if f.s.WatchRoot {
		// The symlink itself is replaced, so watch the directory holding it.
		if err := w.Add(filepath.Dir(root)); err != nil {
			f.log.Warn("cannot watch configuration directory; changes will not be picked up", "dir", filepath.Dir(root), "error", err)
		}
	} else {
		dw = &dirWatch{w: w, dir: filepath.Clean(f.dir()), log: f.log}
		dw.update()
	}

	send := func() bool {
		files, err := f.Load()
		select {
		case out <- ConfigEvent{Files: files, Err: err}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !send() {
		return nil
	}
	// Settle briefly so one change is one reload.
	const settle = 20 * time.Millisecond
	event := func(ev fsnotify.Event) bool {
		if dw != nil && ev.Op&(fsnotify.Create|fsnotify.Remove|fsnotify.Rename) != 0 {
			// The directory (or one above it) came or went: watch what
			// exists now, so a recreated directory is watched again.
			dw.update()
		}
		return f.relevant(ev, root)
	}
	settled := func() bool {
		if dw != nil {
			dw.update()
		}
		return send()
	}
	fswatch.Settled(ctx, w, settle, event, settled, func(err error) {
		f.log.Warn("configuration watcher error", "error", err)
	})
	return nil
}

func (f *FileSource) relevant(ev fsnotify.Event, root string) bool {
	if f.s.WatchRoot {
		return filepath.Clean(ev.Name) == root && ev.Op&(fsnotify.Create|fsnotify.Rename|fsnotify.Write|fsnotify.Remove) != 0
	}
	// Rename is a file moved out of the directory (or renamed within it):
	// its rules must go, as a removed file's do. The reference watches only
	// Write, Create, Chmod and Remove, and keeps a moved-out file's domain
	// until something else changes.
	return ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Chmod|fsnotify.Remove|fsnotify.Rename) != 0
}

// dirWatch keeps a watch on a directory that may be deleted and created again
// (RUNTIME_WATCH_ROOT=false). While the directory exists it is watched
// itself; while it does not, its nearest existing ancestor is, so that its
// creation is an event. A reload follows every such change and reads every
// file, so files written before the new watch took hold are not missed.
type dirWatch struct {
	w       *fsnotify.Watcher
	dir     string
	log     *slog.Logger
	watched string // the path watched now, "" when none
	warned  bool
}

func (d *dirWatch) update() {
	for p := d.dir; ; p = filepath.Dir(p) {
		// Add again even when p is watched already: a no-op for the same
		// directory, and the way to watch one deleted and created again
		// between two looks (its old watch went with it).
		if err := d.w.Add(p); err == nil {
			if d.watched != p {
				if d.watched != "" {
					_ = d.w.Remove(d.watched) // gone with its directory, or an ancestor no longer needed
				}
				if p != d.dir {
					d.log.Warn("configuration directory is missing; watching for it to be created", "dir", d.dir, "watching", p)
				}
				d.watched, d.warned = p, false
			}
			return
		}
		if filepath.Dir(p) == p {
			if !d.warned {
				d.log.Warn("cannot watch configuration directory; changes will not be picked up", "dir", d.dir)
				d.warned = true
			}
			d.watched = ""
			return
		}
	}
}
