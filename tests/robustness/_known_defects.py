"""Entry points whose fuzzing fails today, found by test_fuzz_entry_points.py (issue 25
§1) and not fixed yet: xfail (strict, so a fix flips the test to XPASS and the entry must
leave this table). Generated from a fuzz report (RML_FAST_FUZZ_REPORT), then edited by hand.
"""

from __future__ import annotations

# entry point -> (failure kinds and the first failing case, strict)
KNOWN_DEFECTS: dict[str, tuple[str, bool]] = {
    'rml_fast.alignment.air.air_loss': (
        'accepted_nan x1, crash x2; e.g. [risk <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.alignment.air.context_metrics': (
        'crash x2; e.g. [correct <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.alignment.air.context_risk': (
        'crash x4; e.g. [ratio <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.alignment.air.sequence_ratio': (
        'crash x2; e.g. [logp_new <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.alignment.air.vrex_loss': (
        'accepted_nan x1, crash x1; e.g. [risk <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.alignment.arspo.arspo_advantages': (
        'crash x2, unnamed x1; e.g. [reward <- empty] unnamed: ValueError: group_id must have shape (0,) like the rewards, got (2,)',
        True),
    'rml_fast.alignment.arspo.reward_map': (
        'crash x1; e.g. [s <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.alignment.grpo.grpo_advantages': (
        'crash x2, unnamed x1; e.g. [reward <- empty] unnamed: ValueError: group_id must have shape (0,) like the rewards, got (4,)',
        True),
    'rml_fast.alignment.grpo.grpo_loss': (
        'crash x3; e.g. [logp_new <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.alignment.preference.PreferenceLoss': (
        'crash x4; e.g..forward [zw <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.alignment.preference.PreferenceOutput': (
        'accepted_nan x5; e.g.() [loss <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.alignment.preference.RewardCalibrator': (
        'crash x4; e.g..update [d_w <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.alignment.preference.disentanglement_band': (
        "unnamed x4; e.g. [s_w <- none] unnamed: TypeError: float() argument must be a string or a real number, not 'NoneType'",
        True),
    'rml_fast.alignment.preference.incentives': (
        'crash x4; e.g. [zw <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.alignment.preference.pairwise_loss': (
        'crash x4; e.g. [zw <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.alignment.preference.predicted_delta': (
        "unnamed x10; e.g. [d_w <- none] unnamed: TypeError: unsupported operand type(s) for *: 'NoneType' and 'float'",
        True),
    'rml_fast.alignment.preference.preference_step': (
        'crash x4; e.g. [zw <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.alignment.preference.score_geometry': (
        'crash x14, unnamed x4; e.g. [zw <- nan] crash: RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn',
        True),
    'rml_fast.alignment.preference.sequence_logps': (
        'crash x2, unnamed x1; e.g. [logits <- empty] unnamed: ValueError: labels must be an integer tensor of shape (0, 3)',
        True),
    'rml_fast.alignment.trl_dpo.head_geometry': (
        'crash x8, unnamed x2; e.g. [weight <- empty] crash: IndexError: index out of range in self',
        True),
    'rml_fast.alignment.unlearning.ConvCritic': (
        "crash x2; e.g..pool_mask [mask <- numpy_array] crash: AttributeError: 'numpy.ndarray' object has no attribute 'to'",
        True),
    'rml_fast.alignment.unlearning.MLPCritic': (
        'crash x5, unnamed x3; e.g..forward [output <- empty] unnamed: ValueError: cond must have shape (0, 3)',
        True),
    'rml_fast.alignment.unlearning.VariationalFDivergence': (
        "unnamed x2; e.g..activation [v <- numpy_array] unnamed: TypeError: tanh(): argument 'input' (position 1) must be Tensor, not numpy.ndarray",
        True),
    'rml_fast.alignment.unlearning.alpha_unlearn_loss': (
        'crash x2; e.g. [pred <- meta] crash: RuntimeError: Tensor on device cpu is not on the expected device meta!',
        True),
    'rml_fast.alignment.unlearning.chi2_unlearn_loss': (
        'crash x2; e.g. [pred <- meta] crash: RuntimeError: Tensor on device cpu is not on the expected device meta!',
        True),
    'rml_fast.alignment.unlearning.gaussian_f_divergence': (
        "crash x1; e.g. [sigma <- huge] crash: OverflowError: (34, 'Numerical result out of range')",
        True),
    'rml_fast.alignment.unlearning.hellinger_unlearn_loss': (
        'crash x2; e.g. [pred <- meta] crash: RuntimeError: Tensor on device cpu is not on the expected device meta!',
        True),
    'rml_fast.alignment.unlearning.masked_mean_sq': (
        'crash x3; e.g. [pred <- meta] crash: RuntimeError: Tensor on device cpu is not on the expected device meta!',
        True),
    'rml_fast.alignment.unlearning.mse_unlearn_loss': (
        'crash x2; e.g. [pred <- meta] crash: RuntimeError: Tensor on device cpu is not on the expected device meta!',
        True),
    'rml_fast.alignment.unlearning.pcgrad_project': (
        'crash x2; e.g. [g_a <- meta] crash: RuntimeError: Tensor on device cpu is not on the expected device meta!',
        True),
    'rml_fast.alignment.unlearning.unlearn': (
        "crash x1; e.g. [x0 <- nan] crash: FloatingPointError: non-finite unlearning loss at step 0; for 'chi2' increase sigma",
        True),
    'rml_fast.audit.AttributionResult': (
        'accepted_nan x3; e.g.() [values <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.audit.GenerativeInterventionalAttribution': (
        'unnamed x5; e.g..fit [x <- empty] unnamed: ValueError: operands could not be broadcast together with shapes (1,0) (1,256) ',
        True),
    'rml_fast.audit.InpaintingGenerator': (
        'unnamed x1; e.g.() [masks <- empty] unnamed: ValueError: need at least one array to stack',
        True),
    'rml_fast.audit.InterventionGame': (
        'accepted_nan x2; e.g.() [x <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.audit.ObjectScene': (
        'accepted_nan x7, crash x6, unnamed x5; e.g.() [background <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.audit.ToyRiskModel': (
        'unnamed x2; e.g..presence [images <- empty] unnamed: ValueError: cannot reshape array of size 0 into shape (0,newaxis)',
        True),
    'rml_fast.audit.coalition_values': (
        'hang x1; e.g. [n_players <- drawn_int] hang: no answer within 2 s',
        False),
    'rml_fast.audit.exact_attribution_reference': (
        'accepted_nan x1; e.g. [values <- nan_in_list] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.audit.insertion_curve': (
        'unnamed x6; e.g. [x_bg <- empty] unnamed: ValueError: operands could not be broadcast together with shapes (0,) (3,) ',
        True),
    'rml_fast.compat.dp_accounting.SGGDpEvent': (
        'unnamed x9; e.g..mechanism [sensitivity_scale <- nan] unnamed: ValueError: sensitivity must be a finite real number in the range (0.0, inf), got nan',
        True),
    'rml_fast.compat.sklearn.Lasso': (
        'unnamed x1; e.g..fit [y <- empty_list] unnamed: ValueError: Found array with 0 sample(s) (shape=(0,)) while a minimum of 1 is required by Lasso.',
        True),
    'rml_fast.compat.sklearn.lasso_path': (
        'unnamed x7; e.g. [X <- empty] unnamed: ValueError: Found array with 0 sample(s) (shape=(0, 3)) while a minimum of 1 is required.',
        True),
    'rml_fast.config.check_memory': (
        'unnamed x3; e.g. [estimate <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.decisions.AdaptiveSubspaceRecourse': (
        'unnamed x4; e.g..fit [X <- empty] unnamed: ValueError: Found array with 0 sample(s) (shape=(0, 3)) while a minimum of 1 is required by AdaptiveSubspaceRecourse.',
        True),
    'rml_fast.decisions.AttentionICL': (
        'unnamed x1; e.g.() [context_X <- empty] unnamed: ValueError: context_y must have shape (0,), got (2,)',
        True),
    'rml_fast.decisions.ICLTabularNet': (
        'crash x1, unnamed x11; e.g.() [d_max <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.decisions.RecourseResult': (
        'accepted_nan x3; e.g.() [x_cf <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.decisions.RobustComplementarity': (
        'unnamed x8; e.g..predict [X <- empty] unnamed: ValueError: Found array with 0 sample(s) (shape=(0, 2)) while a minimum of 1 is required by RobustComplementarity.',
        True),
    'rml_fast.decisions.asr_recourse': (
        "unnamed x9; e.g. [n_classes <- nan] unnamed: TypeError: 'float' object cannot be interpreted as an integer",
        True),
    'rml_fast.decisions.compare_strategies': (
        'unnamed x2; e.g. [X_fit <- nan] unnamed: ValueError: Input X contains NaN.\nRobustComplementarity does not accept missing values encoded as NaN natively. For supervise',
        True),
    'rml_fast.decisions.robust_pooling_weight': (
        'unnamed x1; e.g. [s_h <- huge] unnamed: ValueError: w must be finite, got NaN or infinite values',
        True),
    'rml_fast.decisions.train_icl_transformer': (
        'unnamed x1; e.g. [d_max <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.evaluation.b3it.two_sample_statistics': (
        "unnamed x1; e.g. [det_per_prompt <- drawn_int] unnamed: ValueError: new_samples['x'] must hold at least 85 samples, got 20",
        True),
    'rml_fast.evaluation.bite.AttackResult': (
        'accepted_nan x7; e.g.() [scores <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.evaluation.bite.arena_hard_verdict': (
        "unnamed x1; e.g. [text <- bogus_string] unnamed: ValueError: no Arena-Hard verdict [[A>>B]] ... [[B>>A]] found in '__no_such_option__'",
        True),
    'rml_fast.evaluation.culture_mt.MetaReport': (
        'crash x6; e.g..get [metric <- none] crash: KeyError: "no meta-evaluation row (\'segment\', None, \'all\', \'all\', \'kendall_tau_b\')"',
        True),
    'rml_fast.evaluation.culture_mt.parse_judge_output': (
        'unnamed x3; e.g. [text <- none] unnamed: ValueError: judge output must be a str, got NoneType',
        True),
    'rml_fast.evaluation.cyberteam.Workflow': (
        "unnamed x3; e.g..ancestors [name <- none] unnamed: ValueError: unknown task None; tasks: ['malware_identification', 'infrastructure_extraction', 'actor_identification",
        True),
    'rml_fast.evaluation.cyberteam.cvss31_roundup': (
        'crash x2, unnamed x4; e.g. [x <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.evaluation.cyberteam.cvss_attributes_to_vector': (
        "unnamed x1; e.g. [text <- bogus_string] unnamed: CVSSVectorError: malformed CVSS attributes '__no_such_option__': missing base metric(s) AV, AC, PR, UI, S, C, I, A",
        True),
    'rml_fast.evaluation.cyberteam.extract_json': (
        "unnamed x1; e.g. [text <- bogus_string] unnamed: ValueError: no JSON object found in the reply '__no_such_option__'",
        True),
    'rml_fast.evaluation.irt.ConsistencyReport': (
        'accepted_nan x6; e.g.() [a <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.evaluation.irt.GradedResponseModel': (
        'unnamed x1; e.g..from_params [a <- empty_list] unnamed: ValueError: d must have shape (J, K-1) with J=0, got (1, 2)',
        True),
    'rml_fast.evaluation.irt.krippendorff_alpha': (
        'accepted_nan x2; e.g. [ratings <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.evaluation.valueflow.ValueHierarchy': (
        "unnamed x6; e.g..tree_distance [a <- none] unnamed: ValueError: unknown node None; known: ['achievement', 'benevolence', 'benevolence:caring', 'benevolence:dependabil",
        True),
    'rml_fast.evaluation.valueflow.anchor_infonce_loss': (
        'crash x2; e.g. [z <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.evaluation.valueflow.hmce_loss': (
        'crash x2; e.g. [z <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.evaluation.valueflow.parse_ranking': (
        "unnamed x10; e.g. [k <- nan] unnamed: TypeError: 'float' object cannot be interpreted as an integer",
        True),
    'rml_fast.fairness.compatibility.MetricGame': (
        'accepted_nan x3, crash x5, unnamed x17; e.g.() [X <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.fairness.multiclass.OptFairInProcessing': (
        'unnamed x5; e.g..predict_proba [X <- empty] unnamed: ValueError: Found array with 0 sample(s) (shape=(0, 2)) while a minimum of 1 is required by OptFairInProcessing.',
        True),
    'rml_fast.fairness.multiclass.OptFairPostProcessor': (
        'unnamed x10; e.g..predict [X <- empty] unnamed: ValueError: Found array with 0 sample(s) (shape=(0, 2)) while a minimum of 1 is required by OptFairPostProcessor.',
        True),
    'rml_fast.fairness.multiclass.OptFairReduction': (
        'unnamed x10; e.g..predict_proba [X <- empty] unnamed: ValueError: Found array with 0 sample(s) (shape=(0, 2)) while a minimum of 1 is required by OptFairReduction.',
        True),
    'rml_fast.fairness.multiclass.fairness_frontier': (
        "unnamed x1; e.g. [proba <- nan] unnamed: ValueError: X (base probabilities, estimator='passthrough') must be finite, got NaN or infinite values",
        True),
    'rml_fast.federated.FedAvgClient': (
        'unnamed x12; e.g..handle [server_round <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.federated.FedProtoClient': (
        'unnamed x4; e.g..handle [server_round <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.federated.LocalClient': (
        'unnamed x2; e.g..handle [server_round <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.federated.ShamirField': (
        'unnamed x3; e.g..encode [x <- none] unnamed: ValueError: values times 2^2 must lie strictly within +-(P-1)/2 = +-1152921504606846975 (and be finite) to be encoded wit',
        True),
    'rml_fast.federated.SoHipAgent': (
        'crash x28, unnamed x9; e.g..extract [x <- numpy_array] unnamed: TypeError: conv2d() received an invalid combination of arguments - got (numpy.ndarray, Parameter, Parameter, tupl',
        True),
    'rml_fast.federated.SoHipClient': (
        'unnamed x2; e.g..handle [server_round <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.federated.ThresholdWatermarkClient': (
        'unnamed x4; e.g..handle [server_round <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.federated.finetune_attack': (
        'accepted_nan x2, unnamed x3; e.g. [X <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.CompletenessReport': (
        'accepted_nan x3; e.g.() [target <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.DEUBank': (
        'accepted_nan x3; e.g.() [U <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.EdgeGraph': (
        "crash x2, unnamed x17; e.g.() [has_mlp <- none] unnamed: TypeError: int() argument must be a string, a bytes-like object or a real number, not 'NoneType'",
        True),
    'rml_fast.interp.EnergyDPS': (
        'crash x12, unnamed x7; e.g.() [betas <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.interp.ExactPathKernel': (
        'accepted_nan x1, crash x6; e.g..completeness [X <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.GaussianPriorEps': (
        'accepted_nan x3, crash x8, unnamed x1; e.g.() [mu <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.HeldOutWordsRegression': (
        'accepted_nan x1; e.g..fit_score [hidden_target <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.LogitDiff': (
        'accepted_nan x1, crash x3; e.g..from_rows [rows <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.MixtureOfFactorAnalyzers': (
        'unnamed x13; e.g..predict [X <- empty] unnamed: ValueError: Found array with 0 sample(s) (shape=(0, 5)) while a minimum of 1 is required by MixtureOfFactorAnalyzers.',
        True),
    'rml_fast.interp.NativeNetworkAnatomy': (
        'accepted_nan x1, crash x6, unnamed x1; e.g..sca [pos_ids <- nan] crash: RuntimeError: value cannot be converted to type int64 without overflow',
        True),
    'rml_fast.interp.QueryCircuitSearch': (
        'crash x1; e.g..fit [clean <- empty] crash: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        True),
    'rml_fast.interp.QueryLens': (
        'accepted_nan x1, crash x7, unnamed x4; e.g..fit [contexts <- empty] unnamed: ValueError: mask must mark at least one valid token',
        True),
    'rml_fast.interp.SparseDict': (
        'accepted_nan x4; e.g.() [W_enc <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.StabilityStudy': (
        "unnamed x1; e.g.() [seeds <- none] unnamed: TypeError: 'NoneType' object is not iterable",
        True),
    'rml_fast.interp.SyntheticAgent': (
        'crash x9, unnamed x3; e.g..pick [k <- nan] unnamed: TypeError: slice indices must be integers or None or have an __index__ method',
        True),
    'rml_fast.interp.TopKSAE': (
        'crash x7, unnamed x2; e.g.() [seed <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.interp.TracedScorer': (
        'unnamed x11; e.g..fit [X <- empty] unnamed: ValueError: Found array with 0 sample(s) (shape=(0, 7)) while a minimum of 1 is required by TracedScorer.',
        True),
    'rml_fast.interp.TrainingHistory': (
        'crash x1, unnamed x4; e.g..log_step [batch_indices <- meta] crash: NotImplementedError: Cannot copy out of meta tensor; no data!',
        True),
    'rml_fast.interp.UnitActivation': (
        "crash x3; e.g..forward [x <- numpy_array] crash: AttributeError: 'numpy.ndarray' object has no attribute 'dim'",
        True),
    'rml_fast.interp.attention_signatures': (
        'crash x1; e.g. [prompts <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors (passed in a second run: load-dependent)',
        False),
    'rml_fast.interp.center_mask': (
        'crash x2, unnamed x16; e.g. [h <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.interp.centered_cosine': (
        'accepted_nan x2; e.g. [X <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.circuit_eval.source_activations': (
        'crash x1; e.g. [tokens <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.interp.circuit_search_many.query_circuits_many': (
        "unnamed x2; e.g. [n_edges <- nan] unnamed: TypeError: 'float' object is not iterable",
        True),
    'rml_fast.interp.cosine_similarity_rows': (
        'accepted_nan x2; e.g. [A <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.deu_decompose': (
        'crash x1; e.g. [W <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.interp.evaluate_masks': (
        'crash x3; e.g. [clean <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors (passed in a second run: load-dependent)',
        False),
    'rml_fast.interp.head_representations': (
        'crash x1; e.g. [prompts <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors (passed in a second run: load-dependent)',
        False),
    'rml_fast.interp.head_similarity': (
        'crash x2, unnamed x14; e.g. [sig_a <- nan] unnamed: ValueError: signatures[0] must be finite (use_scores signatures must be causal_only)',
        True),
    'rml_fast.interp.last_position': (
        'accepted_nan x1; e.g. [output <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.layer_stability': (
        'crash x1; e.g. [stab <- int] crash: RuntimeError: mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: Long',
        True),
    'rml_fast.interp.layerwise_rsa': (
        'accepted_nan x1; e.g. [S_behav <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.linear_cka': (
        'crash x2; e.g. [X <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.interp.logit_diff': (
        'accepted_nan x1, crash x7, unnamed x2; e.g. [logits <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.match_heads': (
        'crash x1; e.g. [sim <- meta] crash: NotImplementedError: Cannot copy out of meta tensor; no data!',
        True),
    'rml_fast.interp.ppmi': (
        "unnamed x1; e.g. [C <- extra_dim] unnamed: ValueError: CSR arrays don't yet support 3D.",
        True),
    'rml_fast.interp.reduce_map': (
        "crash x3; e.g. [A <- numpy_array] crash: AttributeError: 'numpy.ndarray' object has no attribute 'dim'",
        True),
    'rml_fast.interp.rsa': (
        'accepted_nan x3; e.g. [S1 <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.sample_edge_masks': (
        'crash x2; e.g. [scores <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors (passed in a second run: load-dependent)',
        False),
    'rml_fast.interp.simulate_curves': (
        'unnamed x11; e.g. [b <- nan] unnamed: ValueError: p < 0, p > 1 or p contains NaNs',
        True),
    'rml_fast.interp.stability_from_similarity': (
        'accepted_nan x1, crash x2; e.g. [sims <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.interp.stability_importance_correlation': (
        "unnamed x2; e.g. [stab <- meta] unnamed: TypeError: can't convert meta device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.",
        True),
    'rml_fast.interp.steering_vector': (
        "unnamed x3; e.g. [acts_neg <- torch_tensor] unnamed: TypeError: unsupported operand type(s) for -: 'numpy.ndarray' and 'Tensor'",
        True),
    'rml_fast.interp.step_embeddings': (
        'unnamed x1; e.g. [hidden <- empty] unnamed: ValueError: step 0 (slice(0, 2, None)) selects no token of the 0 tokens',
        True),
    'rml_fast.interp.subspace_overlap': (
        'crash x3; e.g. [W_i <- nan] crash: _LinAlgError: linalg.svd: The algorithm failed to converge because the input matrix contained non-finite values.',
        True),
    'rml_fast.interp.svcca': (
        'crash x2; e.g. [X <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.kernels.clip.ghost_norm_sq_blas': (
        'crash x2; e.g. [A <- meta] crash: RuntimeError: Tensor on device cpu is not on the expected device meta!',
        True),
    'rml_fast.kernels.clip.ghost_norm_sq_reference': (
        'crash x8; e.g. [A <- empty] crash: RuntimeError: The size of tensor a (0) must match the size of tensor b (3) at non-singleton dimension 0',
        True),
    'rml_fast.kernels.lasso.ridge_refit': (
        'unnamed x10; e.g. [y <- nan] unnamed: ValueError: Y must be finite, got NaN or infinite values',
        True),
    'rml_fast.kernels.nudft.FrequencyGrid': (
        'accepted_nan x2, crash x1, unnamed x2; e.g.() [max_freq <- huge] crash: OverflowError: int too big to convert',
        True),
    'rml_fast.kernels.nudft.NUDFTPlan': (
        "crash x2, unnamed x2; e.g..type1_planes [density <- none] unnamed: TypeError: int() argument must be a string, a bytes-like object or a real number, not 'NoneType'",
        True),
    'rml_fast.kernels.nudft.nudft_type1': (
        'unnamed x1; e.g. [x <- empty] unnamed: ValueError: v must have shape (B, N, C) = (0, 7, C), got (2, 7, 3)',
        True),
    'rml_fast.kernels.nudft.nudft_type2': (
        'crash x1, unnamed x1; e.g. [x <- empty] unnamed: ValueError: coeffs must have shape (B, F, O) = (0, 3, O), got (1, 3, 1)',
        True),
    'rml_fast.kernels.nudft.nudft_type2_hermitian': (
        'unnamed x4; e.g. [yhat <- empty] unnamed: ValueError: coeffs must have shape (B, F, O) = (1, 50, O), got (0, 50, 1)',
        True),
    'rml_fast.kernels.sgg.counters_per_row': (
        'unnamed x3; e.g. [dim <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.models.ConceptMixture': (
        'accepted_nan x2, crash x1; e.g.() [means <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.models.ConditionalDenoiser': (
        'crash x11, unnamed x2; e.g..forward [x_t <- empty] crash: RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 0 but got size 5 for tensor number 1 in ',
        True),
    'rml_fast.models.DDPMSchedule': (
        'crash x6, unnamed x2; e.g..q_sample [x0 <- numpy_array] unnamed: TypeError: to() received an invalid combination of arguments - got (numpy.dtypes.Float32DType), but expected on',
        True),
    'rml_fast.models.InductionTask': (
        'crash x1, unnamed x4; e.g..train_batch [batch <- nan] unnamed: TypeError: rand() received an invalid combination of arguments - got (float, int, generator=torch._C.Generator), ',
        True),
    'rml_fast.models.TinyTransformer': (
        'crash x1, unnamed x2; e.g.() [seed <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.models.autoencoder.TinyAutoencoder': (
        'crash x1; e.g..encode [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors (passed in a second run: load-dependent)',
        False),
    'rml_fast.models.digits_diffusion.DigitsCNN': (
        'crash x4, unnamed x1; e.g..forward [x <- numpy_array] unnamed: TypeError: conv2d() received an invalid combination of arguments - got (numpy.ndarray, Parameter, Parameter, tupl (passed in a second run: load-dependent)',
        False),
    'rml_fast.models.digits_diffusion.DigitsDDPM': (
        'accepted_nan x2; e.g.() [betas <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.models.digits_diffusion.DigitsEpsNet': (
        'crash x9, unnamed x1; e.g..forward [x_t <- empty] crash: RuntimeError: The size of tensor a (0) must match the size of tensor b (2) at non-singleton dimension 0 (passed in a second run: load-dependent)',
        False),
    'rml_fast.models.digits_vlm.TinyVLM': (
        'accepted_nan x2, crash x17, unnamed x18; e.g.() [seed <- nan] unnamed: ValueError: cannot convert float NaN to integer',
        True),
    'rml_fast.models.digits_vlm.TrainedVLM': (
        'accepted_nan x1; e.g.() [losses <- nan_in_list] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.models.digits_vlm.decode': (
        "unnamed x1; e.g. [ids <- none] unnamed: TypeError: 'NoneType' object is not iterable",
        True),
    'rml_fast.models.digits_vlm.digit_of_token': (
        "unnamed x1; e.g. [ids <- numpy_array] unnamed: TypeError: full_like(): argument 'input' (position 1) must be Tensor, not numpy.ndarray",
        True),
    'rml_fast.models.digits_vlm.digits_vlm_split': (
        'unnamed x4; e.g. [seed <- nan] unnamed: TypeError: SeedSequence expects int or sequence of ints for entropy not nan',
        True),
    'rml_fast.models.make_task': (
        "unnamed x3; e.g. [name <- none] unnamed: ValueError: task must be one of ['charlm', 'digits_add', 'induction', 'ioi', 'modadd'], got None",
        True),
    'rml_fast.neural_processes.SFConvCNP': (
        'unnamed x3; e.g..forward [xc <- nan] unnamed: ValueError: x_kv must be finite, got 1 NaN/inf entries (first at index (0, 0, 0))',
        True),
    'rml_fast.neural_processes.SetFourierConv': (
        'crash x1, unnamed x49; e.g.() [spatial_dim <- nan] unnamed: TypeError: dim must be an int in the range [1, 2], got float nan',
        True),
    'rml_fast.neural_processes.SetFourierConvBlock': (
        'crash x6, unnamed x27; e.g.() [spatial_dim <- nan] unnamed: TypeError: dim must be an int in the range [1, 2], got float nan',
        True),
    'rml_fast.neural_processes.SetFourierVolterraConv': (
        'crash x1, unnamed x52; e.g.() [args <- nan] unnamed: TypeError: dim must be an int in the range [1, 2], got float nan',
        True),
    'rml_fast.neural_processes.SetFourierVolterraConvBlock': (
        'crash x2, unnamed x13; e.g.() [spatial_dim <- nan] unnamed: TypeError: dim must be an int in the range [1, 2], got float nan',
        True),
    'rml_fast.neural_processes.data.Batch': (
        'accepted_nan x4; e.g.() [xc <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.neural_processes.data.gp_kernel': (
        "crash x2, unnamed x9; e.g. [x2 <- torch_tensor] unnamed: TypeError: unsupported operand type(s) for -: 'numpy.ndarray' and 'Tensor'",
        True),
    'rml_fast.neural_processes.models.gaussian_nll': (
        'crash x1, unnamed x3; e.g. [yq <- nan] unnamed: ValueError: Expected value argument (Tensor of shape (2, 34, 1)) to be within the support (Real()) of the distribution Normal(lo',
        True),
    'rml_fast.neural_processes.nll_loss': (
        'crash x1, unnamed x3; e.g. [yq <- nan] unnamed: ValueError: Expected value argument (Tensor of shape (2, 34, 1)) to be within the support (Real()) of the distribution Normal(lo',
        True),
    'rml_fast.neural_processes.sfconv.gaussian_envelope': (
        "crash x6; e.g. [xi <- numpy_array] crash: AttributeError: 'numpy.ndarray' object has no attribute 'square'",
        True),
    'rml_fast.parallel.item_seeds': (
        'unnamed x1; e.g. [rng <- negative] unnamed: ValueError: expected non-negative integer',
        True),
    'rml_fast.parallel.parallel_map': (
        "unnamed x1; e.g. [items <- none] unnamed: TypeError: 'NoneType' object is not iterable",
        True),
    'rml_fast.privacy.ClippingEngine': (
        'crash x1; e.g..backward [losses <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.privacy.PrivacyLossDistribution': (
        'unnamed x1; e.g..from_laplace [sensitivity <- huge] unnamed: ValueError: the privacy-loss range [-2e+298, 2e+298] needs 4000000000000000210019041020817680994817874324',
        True),
    'rml_fast.privacy.SGGMechanism': (
        'unnamed x9; e.g..pld [value_discretization_interval <- nan] unnamed: ValueError: h must be a finite real number in the range (0.0, 1.0), got nan',
        True),
    'rml_fast.privacy.auditing.DeltaEstimate': (
        'accepted_nan x5; e.g.() [epsilons <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.privacy.auditing.MechanismAudit': (
        'accepted_nan x10; e.g.() [epsilons <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.privacy.auditing.one_run_epsilon_lower_bound': (
        'unnamed x3; e.g. [num_guesses <- zero] unnamed: ValueError: num_correct must be an int in the range [0, 0], got 100',
        True),
    'rml_fast.privacy.auditing.one_run_p_value': (
        'unnamed x1; e.g. [num_guesses <- zero] unnamed: ValueError: num_correct must be an int in the range [0, 0], got 10',
        True),
    'rml_fast.privacy.dp_c4.privacy_spent': (
        'unnamed x2; e.g. [noise_multiplier <- nan] unnamed: ValueError: std must be a finite real number in the range (0.0, inf), got nan',
        True),
    'rml_fast.privacy.dp_c4.stability_floor_beta': (
        'crash x1, unnamed x13; e.g. [numel <- negative] unnamed: ValueError: math domain error',
        True),
    'rml_fast.privacy.grad_norms.GemmForm': (
        'accepted_nan x4; e.g.() [weight <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.privacy.per_sample_grad_norms': (
        'crash x4, unnamed x3; e.g. [inputs <- empty] unnamed: ValueError: Expected input batch_size (0) to match target batch_size (5). (passed in a second run: load-dependent)',
        False),
    'rml_fast.privacy.per_sample_losses': (
        'crash x4, unnamed x3; e.g. [output <- empty] unnamed: ValueError: Expected input batch_size (0) to match target batch_size (5).',
        True),
    'rml_fast.security.CallableVLMAdapter': (
        'accepted_nan x1, crash x1, unnamed x1; e.g..prepare [pixel_values <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.security.TinyVLMAdapter': (
        'accepted_nan x1, unnamed x4; e.g..prepare [pixel_values <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.security.VLMInputs': (
        'accepted_nan x2; e.g.() [pixel_values <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.security.attack_success_rate': (
        "unnamed x2; e.g. [targets <- none] unnamed: TypeError: object of type 'NoneType' has no len()",
        True),
    'rml_fast.security.topk_mask': (
        'accepted_nan x1, crash x1, unnamed x1; e.g. [scores <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.steering.BOResult': (
        'accepted_nan x3; e.g.() [X <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.steering.SAEDecoderAdapter': (
        'unnamed x1; e.g..from_arrays [W_dec <- empty] unnamed: ValueError: b_dec must have shape (0,) (the rows of D), got (8,)',
        True),
    'rml_fast.steering.bayes_opt.GaussianProcess1D': (
        'crash x1, unnamed x6; e.g..predict [xq <- nan] unnamed: ValueError: array must not contain infs or NaNs',
        True),
    'rml_fast.steering.bayes_opt.log_expected_improvement': (
        'crash x3, unnamed x2; e.g. [mean <- empty] crash: IndexError: boolean index did not match indexed array along axis 0; size of axis is 0 but size of corresponding boolean axis i',
        True),
    'rml_fast.strategic.ambiguity.AmbiguousStrategicClassifier': (
        'unnamed x8; e.g..predict [X <- empty] unnamed: ValueError: Found array with 0 sample(s) (shape=(0, 2)) while a minimum of 1 is required by AmbiguousStrategicClassifie',
        True),
    'rml_fast.strategic.ambiguity.BallSet': (
        'accepted_nan x2, unnamed x1; e.g..in_region [X <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.strategic.ambiguity.FiniteSet': (
        'accepted_nan x2, unnamed x1; e.g..in_region [X <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.strategic.ambiguity.IntervalSet': (
        'accepted_nan x4, unnamed x3; e.g..in_region [X <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.strategic.ambiguity.RealizedRule': (
        'accepted_nan x2; e.g.() [w <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.strategic.ambiguity.exact_interval_sweep': (
        'unnamed x1; e.g. [scores <- empty] unnamed: ValueError: y must be 0/1 labels of shape (0,)',
        True),
    'rml_fast.strategic.decision_dependent.LinearRule': (
        "unnamed x2; e.g.() [b <- none] unnamed: TypeError: float() argument must be a string or a real number, not 'NoneType'",
        True),
    'rml_fast.strategic.decision_dependent.RobustStrategicClassifier': (
        'unnamed x12; e.g..predict [X <- empty] unnamed: ValueError: Found array with 0 sample(s) (shape=(0, 2)) while a minimum of 1 is required by RobustStrategicClassifier.',
        True),
    'rml_fast.strategic.decision_dependent.StageCertificate': (
        'accepted_nan x3; e.g.() [alpha <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.strategic.decision_dependent.TwoStageDDURobustClassifier': (
        'unnamed x8; e.g..predict [X <- empty] unnamed: ValueError: Found array with 0 sample(s) (shape=(0, 1)) while a minimum of 1 is required by TwoStageDDURobustClassifier',
        True),
    'rml_fast.strategic.decision_dependent.robust_strategic_objective': (
        'unnamed x8; e.g. [w <- empty] unnamed: ValueError: matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature (n?,k),(k,m?)->(n?,m?) (size ',
        True),
    'rml_fast.strategic.simulator.RoundResult': (
        'accepted_nan x2; e.g.() [X_response <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.strategic.simulator.SimulationResult': (
        'accepted_nan x3; e.g.() [X_response <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.strategic.simulator.grid_best_response': (
        'unnamed x1; e.g. [X <- empty] unnamed: ValueError: Found array with 0 sample(s) (shape=(0, 1)) while a minimum of 1 is required by DecisionTreeClassifier. (passed in a second run: load-dependent)',
        False),
    'rml_fast.strategic.simulator.linear_rule': (
        'unnamed x9; e.g. [d <- nan] unnamed: ValueError: classifier must be a binary linear rule with coef_ of nan weights and one intercept, got coef_ shape (1, 2) and inter',
        True),
    'rml_fast.trees.FallingTree': (
        'accepted_nan x2; e.g.() [risk <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.trees.QuantileBinarizer': (
        'crash x1; e.g..fit [X <- empty] crash: IndexError: index -1 is out of bounds for axis 0 with size 0',
        True),
    'rml_fast.trees.ThresholdGuessBinarizer': (
        'unnamed x1; e.g..fit [X <- empty] unnamed: ValueError: y must have 0 entries, got 100 (passed in a second run: load-dependent)',
        False),
    'rml_fast.verification.ConceptVerifier': (
        "crash x7, unnamed x3; e.g.() [hidden <- none] unnamed: TypeError: 'NoneType' object is not iterable",
        True),
    'rml_fast.verification.KSparseProver': (
        'crash x6, unnamed x2; e.g..select [z <- empty] unnamed: ValueError: torch.cat(): expected a non-empty list of Tensors',
        True),
    'rml_fast.verification.NeuralConceptVerifier': (
        'unnamed x8; e.g..predict_proba [X <- empty] unnamed: ValueError: Found array with 0 sample(s) (shape=(0, 4)) while a minimum of 1 is required by NeuralConceptVerifier (passed in a second run: load-dependent)',
        False),
    'rml_fast.verification.morgana_loss': (
        'crash x6, unnamed x1; e.g. [logits <- empty] crash: RuntimeError: Size does not match at dimension 0 expected index [1, 1] to be no larger than self [0, 3] apart from dimension',
        True),
    'rml_fast.watermark.PixelExtractor': (
        'crash x4, unnamed x1; e.g..forward [x <- numpy_array] unnamed: TypeError: conv2d() received an invalid combination of arguments - got (numpy.ndarray, Parameter, Parameter, tupl (passed in a second run: load-dependent)',
        False),
    'rml_fast.watermark.StraightThroughQuantizer': (
        'accepted_nan x2, crash x6, unnamed x7; e.g.() [codebook <- nan] accepted_nan: NaN input gave a finite result',
        True),
    'rml_fast.watermark.augment.brightness': (
        'crash x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.augment.contrast': (
        'crash x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.augment.crop': (
        'crash x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.augment.gaussian_blur': (
        'crash x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.augment.gaussian_noise': (
        'crash x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.augment.grayscale': (
        'crash x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.augment.hflip': (
        'crash x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.augment.hue': (
        'crash x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.augment.identity': (
        'crash x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.augment.jpeg': (
        'crash x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.augment.median_filter': (
        'crash x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.augment.resize': (
        'crash x1, unnamed x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.augment.rotate': (
        'crash x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.augment.saturation': (
        'crash x1; e.g. [x <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.watermark.distill_generator': (
        'crash x2; e.g. [message <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors (passed in a second run: load-dependent)',
        False),
    'rml_fast.watermark.watermark_latent_dataset': (
        'crash x2; e.g. [latents <- meta] crash: RuntimeError: Tensor.item() cannot be called on meta tensors',
        True),
    'rml_fast.bench_report.format_ratio': (
        'failed in a second run under load (2 shared cores); not triaged yet',
        False),
    'rml_fast.bench_report.write_report': (
        'failed in a second run under load (2 shared cores); not triaged yet',
        False),
    'rml_fast.interp.residual_stability': (
        'failed in a second run under load (2 shared cores); not triaged yet',
        False),
    'rml_fast.interp.attribution.metric_rows': (
        'failed in a second run under load (2 shared cores); not triaged yet',
        False),
    'rml_fast.kernels.circuits.masked_mix': (
        'failed in a second run under load (2 shared cores); not triaged yet',
        False),
    'rml_fast.kernels.gravitree.GraviTreeProblem': (
        'failed in a second run under load (2 shared cores); not triaged yet',
        False),
    'rml_fast.kernels.gravitree.GraviTreeResult': (
        'failed in a second run under load (2 shared cores); not triaged yet',
        False),
    'rml_fast.kernels.sgg.pld_delta_for_epsilon': (
        'failed in a second run under load (2 shared cores); not triaged yet',
        False),
    'rml_fast.models.transformer.activation': (
        'failed in a second run under load (2 shared cores); not triaged yet',
        False),
    'rml_fast.models.transformer.layer_norm': (
        'failed in a second run under load (2 shared cores); not triaged yet',
        False),
    'rml_fast.neural_processes.data.gp_oracle_loglik': (
        'failed in a second run under load (2 shared cores); not triaged yet',
        False),
    'rml_fast.privacy.auditing.audit_canary_scores': (
        'failed in a second run under load (2 shared cores); not triaged yet',
        False),
    'rml_fast.watermark.TinyLatentDDPM': (
        'failed in a second run under load (2 shared cores); not triaged yet',
        False),
}
