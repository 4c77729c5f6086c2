"""A slow, loop-based reference of Bahdanau et al. (2015), Appendix A.2: one
sentence, one vector at a time, written from the paper's equations. It reads the
model's parameters by name and nothing else of its modules (tests/test_bahdanau.py
checks the model against it).

    A.2.1  the GRU: z, r, h̃ = tanh(W x + U (r ∘ h)), h = (1 - z) ∘ h + z ∘ h̃
    A.2.2  the decoder: e_ij = v_aᵀ tanh(W_a s_{i-1} + U_a h_j), α = softmax(e),
           c_i = Σ_j α_ij h_j; s_i = GRU(E y_{i-1}, s_{i-1}, c_i);
           t̃_i = U_o s + V_o E y_{i-1} + C_o c_i, maxout over pairs, W_o t_i
"""

import torch


def linear(layer, x):
    return layer.weight @ x + (0.0 if layer.bias is None else layer.bias)


def paper_gru(gru, x, h, context_terms=(0.0, 0.0, 0.0)):
    """A.2.1 (and A.2.2 with C c_i, C_z c_i, C_r c_i); gru.py stacks (cand, z, r)."""
    n = h.numel()
    W, W_z, W_r = gru.W.weight.split(n)
    b, b_z, b_r = gru.W.bias.split(n)
    U_z, U_r = gru.U_zr.weight.split(n)
    C, C_z, C_r = context_terms
    z = torch.sigmoid(W_z @ x + U_z @ h + C_z + b_z)
    r = torch.sigmoid(W_r @ x + U_r @ h + C_r + b_r)
    h_tilde = torch.tanh(W @ x + gru.U.weight @ (r * h) + C + b)
    return (1 - z) * h + z * h_tilde


def reference(model, src, prev, readout_state):
    """src: the sentence's S_b tokens, prev: T tokens -> logits T x V, α T x S_b."""
    enc, dec = model.encoder, model.decoder
    Ex = [enc.embed_tokens.weight[x] for x in src]
    zero = torch.zeros(enc.hidden_size, dtype=Ex[0].dtype)
    forward, h = [], zero
    for x in Ex:
        h = paper_gru(enc.forward_gru, x, h)
        forward.append(h)
    if dec.attention is not None:
        backward, h = [], zero
        for x in reversed(Ex):
            h = paper_gru(enc.backward_gru, x, h)
            backward.insert(0, h)
        annotations = [torch.cat([f, b]) for f, b in zip(forward, backward)]  # h_j
        s = torch.tanh(linear(dec.W_s, backward[0]))  # s_0 = tanh(W_s h←_1)
        W_a, U_a = dec.attention.W_q.weight, dec.attention.W_k.weight
        v_a = dec.attention.v_a.weight[0]
    else:
        c = torch.tanh(linear(enc.V, forward[-1]))  # c = tanh(V h_{T_x})
        s = torch.tanh(linear(dec.W_s, c))  # s_0 = tanh(V' c)
    logits, alphas = [], []
    for y in prev:
        Ey = dec.embed_tokens.weight[y]
        if dec.attention is not None:
            e = torch.stack(
                [
                    v_a @ torch.tanh(W_a @ s + U_a @ h_j + dec.attention.W_k.bias)
                    for h_j in annotations
                ]
            )
            alpha = torch.exp(e - e.max()) / torch.exp(e - e.max()).sum()
            c = sum(a * h_j for a, h_j in zip(alpha, annotations))
            alphas.append(alpha)
        s_new = paper_gru(dec.gru, Ey, s, (dec.C.weight @ c).split(s.numel()))
        s_read = s if readout_state == "previous" else s_new
        t_tilde = linear(dec.U_o, s_read) + dec.V_o.weight @ Ey + dec.C_o.weight @ c
        t = torch.maximum(t_tilde[0::2], t_tilde[1::2])  # pairs (2j-1, 2j)
        logits.append(linear(dec.W_o, t))
        s = s_new
    return torch.stack(logits), torch.stack(alphas) if alphas else None
