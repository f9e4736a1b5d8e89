// A form generated from a tool's JSON Schema: strings, numbers, integers, booleans and enums
// get their own inputs; any other shape is a JSON text area. `read()` gives the arguments
// object, or the problems found, each shown next to its field.

import { h, uid } from './dom.js';

/** Builds the fields of `schema` into a fieldset; returns `{ element, read }`. */
export function schemaForm(schema) {
  const properties = isObject(schema?.properties) ? schema.properties : null;
  const required = new Set(Array.isArray(schema?.required) ? schema.required : []);
  const fields = [];
  const element = h('div', { class: 'schema-form' });
  if (!properties) {
    if (schemaType(schema) === 'object' || schema === undefined || schema === null) {
      element.append(h('p', { class: 'muted' }, 'This tool takes no arguments.'));
      return { element, read: () => ({ ok: true, value: {} }) };
    }
    const field = jsonField('arguments', 'Arguments (an object)', {}, true, '{}');
    element.append(field.element);
    return { element, read: () => readWhole(field) };
  }
  for (const [name, property] of Object.entries(properties)) {
    const field = makeField(name, isObject(property) ? property : {}, required.has(name));
    fields.push(field);
    element.append(field.element);
  }
  return { element, read: () => readAll(fields) };
}

function readAll(fields) {
  const value = {};
  let ok = true;
  for (const field of fields) {
    const result = field.read();
    field.showProblem(result.problem);
    if (result.problem) ok = false;
    else if (result.set) value[field.name] = result.value;
  }
  return ok ? { ok: true, value } : { ok: false };
}

/** The arguments as one JSON object typed by hand. */
function readWhole(field) {
  const result = field.read();
  const problem = result.problem ?? (isObject(result.value) ? null : 'must be a JSON object');
  field.showProblem(problem);
  return problem ? { ok: false } : { ok: true, value: result.value };
}

function makeField(name, property, isRequired) {
  const type = schemaType(property);
  const label = `${property.title ?? name}${isRequired ? ' (required)' : ''}`;
  if (Array.isArray(property.enum) && property.enum.length > 0) {
    return enumField(name, label, property, isRequired);
  }
  switch (type) {
    case 'string':
      return inputField(name, label, property, isRequired, 'text');
    case 'number':
    case 'integer':
      return inputField(name, label, property, isRequired, type);
    case 'boolean':
      return booleanField(name, label, property, isRequired);
    default:
      return jsonField(name, label, property, isRequired,
        property.default !== undefined ? JSON.stringify(property.default, null, 2) : '');
  }
}

/** Label, hint, problem text and the control, wired for assistive technology. */
function shell(name, label, property, control) {
  const id = uid(`arg-${name.replace(/[^A-Za-z0-9_-]/g, '_')}`);
  control.id = id;
  const hintId = `${id}-hint`;
  const problemId = `${id}-problem`;
  const describedBy = [problemId];
  const parts = [h('label', { for: id }, label)];
  if (typeof property.description === 'string' && property.description) {
    parts.push(h('p', { class: 'hint', id: hintId }, property.description));
    describedBy.push(hintId);
  }
  control.setAttribute('aria-describedby', describedBy.join(' '));
  const problem = h('p', { class: 'error-text', id: problemId, hidden: true });
  parts.push(control, problem);
  return {
    name,
    element: h('div', { class: 'field', dataset: { arg: name } }, parts),
    showProblem(text) {
      problem.textContent = text ? `${label}: ${text}` : '';
      problem.hidden = !text;
      if (text) control.setAttribute('aria-invalid', 'true');
      else control.removeAttribute('aria-invalid');
    },
  };
}

function inputField(name, label, property, isRequired, type) {
  const numeric = type === 'number' || type === 'integer';
  const control = h('input', {
    type: numeric ? 'number' : 'text',
    step: type === 'integer' ? '1' : numeric ? 'any' : null,
    min: numeric && Number.isFinite(property.minimum) ? property.minimum : null,
    max: numeric && Number.isFinite(property.maximum) ? property.maximum : null,
    required: isRequired,
    autocomplete: 'off',
    spellcheck: 'false',
  });
  if (property.default !== undefined && property.default !== null) {
    control.value = String(property.default);
  }
  const field = shell(name, label, property, control);
  field.read = () => {
    const raw = control.value;
    if (raw === '') return isRequired ? { problem: 'is required' } : { set: false };
    if (!numeric) return { set: true, value: raw };
    const value = Number(raw);
    if (!Number.isFinite(value)) return { problem: 'must be a number' };
    if (type === 'integer' && !Number.isInteger(value)) return { problem: 'must be a whole number' };
    return { set: true, value };
  };
  return field;
}

function booleanField(name, label, property, isRequired) {
  if (isRequired) {
    const control = h('input', { type: 'checkbox', checked: property.default === true });
    const field = shell(name, label, property, control);
    field.element.classList.add('check');
    field.read = () => ({ set: true, value: control.checked });
    return field;
  }
  const control = h('select', {},
    h('option', { value: '' }, '(not set)'),
    h('option', { value: 'true' }, 'true'),
    h('option', { value: 'false' }, 'false'));
  if (typeof property.default === 'boolean') control.value = String(property.default);
  const field = shell(name, label, property, control);
  field.read = () => (control.value === ''
    ? { set: false }
    : { set: true, value: control.value === 'true' });
  return field;
}

function enumField(name, label, property, isRequired) {
  const choices = property.enum;
  const control = h('select', { required: isRequired },
    isRequired ? null : h('option', { value: '' }, '(not set)'),
    choices.map((choice, index) => h('option', { value: String(index) },
      typeof choice === 'string' ? choice : JSON.stringify(choice))));
  const initial = choices.findIndex((c) => JSON.stringify(c) === JSON.stringify(property.default));
  if (initial >= 0) control.value = String(initial);
  const field = shell(name, label, property, control);
  field.read = () => (control.value === ''
    ? (isRequired ? { problem: 'choose a value' } : { set: false })
    : { set: true, value: choices[Number(control.value)] });
  return field;
}

function jsonField(name, label, property, isRequired, initial) {
  const control = h('textarea', { rows: 4, class: 'code', spellcheck: 'false' });
  control.value = initial;
  const field = shell(name, `${label} — JSON`, property, control);
  field.read = () => {
    const raw = control.value.trim();
    if (raw === '') return isRequired ? { problem: 'is required' } : { set: false };
    try {
      return { set: true, value: JSON.parse(raw) };
    } catch (error) {
      return { problem: `is not valid JSON (${error.message})` };
    }
  };
  return field;
}

/** The one JSON Schema type of `schema`, ignoring `null` in a type list. */
function schemaType(schema) {
  const type = schema?.type;
  if (Array.isArray(type)) return type.find((t) => t !== 'null') ?? 'null';
  return type;
}

function isObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}
