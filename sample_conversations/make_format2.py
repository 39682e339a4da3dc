"""Regenerate the format 2 samples from the format 1 ones (same conversations).

    PYTHONPATH=. python sample_conversations/make_format2.py sample_conversations

Times are taken to the second and the front matter's model is the model that
answered, as chatloop writes them now; the summary pointer is filled in the
way finalize does. Prints the markup ratio of both formats (python -m bench.run
measures it too).
"""
import sys
from dataclasses import replace
from pathlib import Path, PurePath
import chatloop.format as f
from chatloop.format.front_matter import front_matter_end

from bench.samples import content_bytes as content_len  # one definition of "content"

def to_f2(s):
    meta=s.meta
    msgs=tuple(replace(m, at=m.at.replace(microsecond=0)) for m in s.messages)
    models={m.model for m in msgs if m.role=="assistant"}
    if len(models)==1 and None not in models: meta=replace(meta, model=models.pop())
    s=f.Session(meta, msgs)
    pf = PurePath(meta.parent_file).name if meta.parent_file else None
    meta=replace(meta, format=2, agent_name=PurePath(meta.agent_path).stem if meta.agent_path else "", agent_path="", parent_file=pf)
    s2=f.Session(meta, s.messages)
    data=f.render_markdown(s2)
    summ=[m for m in s.messages if m.role=="summary"]
    if summ and s.messages[-1].role=="summary":
        key=summ[-1].key
        body=front_matter_end(data)
        at=data.index(b"<!-- "+key.encode()+b" summary")-body
        s2=f.Session(replace(meta, summary_key=key, summary_at=at), s.messages)
        data=f.render_markdown(s2)
    return data

tot_c=tot_b1=tot_b2=0
for p in sorted(Path("sample_conversations/format1").glob("*.md")):
    d=p.read_bytes(); r=f.parse_markdown(d,p.stem); s=r.session
    c=content_len(s); b1=len(d)-front_matter_end(d)
    d2=to_f2(s); b2=len(d2)-front_matter_end(d2)
    r2=f.parse_markdown(d2,p.stem)
    assert r2.problems==(), r2.problems
    assert f.render_markdown(r2.session)==d2
    
    (Path(sys.argv[1])/p.name).write_bytes(d2)
    longest=max(len(l) for l in d2.split(b"\n") if l.startswith(b"<!-- "))
    print(f"{p.name:28} content {c:6} f1 markup {(b1-c)/c:.2f} f2 markup {(b2-c)/c:.2f} longest open {longest}")
    tot_c+=c; tot_b1+=b1; tot_b2+=b2
print(f"all: f1 {(tot_b1-tot_c)/tot_c:.3f} f2 {(tot_b2-tot_c)/tot_c:.3f}", tot_b2-tot_c, tot_c)
