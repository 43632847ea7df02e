#!/usr/bin/env python3
# Summarises scripts/tpdu-size-loss.sh OUTDIR: medians and spreads of goodput, CPU
# seconds per GB delivered (the invocation CPU over goodput x (warm-up + measured time)).
import json,glob,os,statistics as st,sys
d=sys.argv[1]
rows={}
for f in glob.glob(d+'/cpu_*.txt'):
    b=os.path.basename(f)[4:-4]
    unit,loss,stack,rnd=b.split('_')
    res=f'{d}/res_{b}.json'
    try:
        r=json.load(open(res)); bps=r['results'][0]['bps']
    except Exception:
        bps=0.0
    try:
        u,s,e=map(float,open(f).read().split()[-3:])
    except Exception:
        u=s=e=float('nan')
    cpu=u+s
    # bytes the receiver saw: goodput over warm-up + measured time
    byts=bps/8*2.5
    rows.setdefault((unit,int(loss),stack),[]).append((bps/1e6,cpu,cpu/byts*1e9 if byts>0 else float('inf')))
stacks=['natm-pp-4k','natm-pp-32k','natm-pp-auto','tcp-bbr']
for unit in ['packet','datagram']:
    print(f'\nloss unit: {unit}; goodput Mbit/s median [min..max] of runs; CPU s per GB delivered (whole invocation) median')
    print('loss | '+' | '.join(stacks)+' | auto/4k | auto/32k')
    for loss in [0,1,5]:
        cells=[];med={}
        for s in stacks:
            v=rows.get((unit,loss,s),[])
            if not v: cells.append('-'); continue
            g=[x[0] for x in v]; c=[x[2] for x in v]
            med[s]=(st.median(g),st.median(c))
            cs='inf' if st.median(c)==float('inf') else f'{st.median(c):.1f}'
            cells.append(f'{st.median(g):.1f} [{min(g):.1f}..{max(g):.1f}] cpu {cs} (n={len(v)})')
        r4=r32='-'
        if 'natm-pp-auto' in med and med.get('natm-pp-4k',(0,))[0]>0: r4=f"{med['natm-pp-auto'][0]/med['natm-pp-4k'][0]:.2f}"
        if 'natm-pp-auto' in med and med.get('natm-pp-32k',(0,))[0]>0: r32=f"{med['natm-pp-auto'][0]/med['natm-pp-32k'][0]:.2f}"
        print(f'{loss}% | '+' | '.join(cells)+f' | {r4} | {r32}')
